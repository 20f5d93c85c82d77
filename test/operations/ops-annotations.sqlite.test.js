const { startApp } = require('../support/app')

/**
 * The Fiori elements annotations of the operator service as a Fiori app reads them: from the served $metadata.
 * A list report or object page breaks silently on an annotation that names a property or action the entity does
 * not have, so every path is checked against the entity type, every action against the bound actions, and every
 * filter field for a label. (Rendering with SAPUI5 needs its libraries, which this machine cannot download.)
 */
const USERS = { ops: { password: 'ops', roles: ['internal-user'] } }
const app = startApp({ requires: { auth: { kind: 'mocked', users: USERS } } })

const SERVICE = 'EventQueuesService'
let metadata

/** The `<Annotations Target="…">` block of `target`, or ''. */
function annotationsOf(target) {
  const start = metadata.indexOf(`<Annotations Target="${target}">`)
  return start === -1 ? '' : metadata.slice(start, metadata.indexOf('</Annotations>', start))
}
/** One `<Annotation Term="…">` inside a block, up to its end. */
function term(block, name) {
  const start = block.indexOf(`<Annotation Term="${name}">`)
  if (start === -1) return ''
  return block.slice(start, block.indexOf('</Annotation>', start))
}
const all = (text, regex) => [...text.matchAll(regex)].map(m => m[1])

function propertiesOf(entity) {
  const start = metadata.indexOf(`<EntityType Name="${entity}">`)
  const type = metadata.slice(start, metadata.indexOf('</EntityType>', start))
  return new Set(all(type, /<Property Name="([^"]+)"/g))
}

function boundActionsOf(entity) {
  const actions = [...metadata.matchAll(/<Action Name="([^"]+)" IsBound="true">\s*<Parameter Name="[^"]+" Type="([^"]+)"/g)]
  return new Set(actions.filter(([, , type]) => type === `${SERVICE}.${entity}`).map(([, name]) => `${SERVICE}.${name}`))
}

beforeAll(async () => {
  const res = await app.axios.get('/odata/v4/event-queues/$metadata', { auth: { username: 'ops', password: 'ops' } })
  metadata = res.data
})

describe.each(['DeadOutboxMessages', 'PendingOutboxMessages'])('Fiori annotations of %s', entity => {
  const annotations = () => annotationsOf(`${SERVICE}.${entity}`)

  test('every property path of the list, the header, the filters, the sort order and the field groups exists on the entity', () => {
    const properties = propertiesOf(entity)
    const paths = [
      ...all(annotations(), /<PropertyValue Property="Value" Path="([^"]+)"/g),
      ...all(annotations(), /<PropertyValue Property="Property" PropertyPath="([^"]+)"/g),
      ...all(term(annotations(), 'UI.SelectionFields'), /<PropertyPath>([^<]+)<\/PropertyPath>/g)
    ]
    expect(paths.length).toBeGreaterThan(15)
    expect(paths.filter(p => !properties.has(p))).toEqual([])
  })

  test('every filter field and list column has a label', () => {
    const fields = new Set([
      ...all(term(annotations(), 'UI.SelectionFields'), /<PropertyPath>([^<]+)<\/PropertyPath>/g),
      ...all(term(annotations(), 'UI.LineItem'), /<PropertyValue Property="Value" Path="([^"]+)"/g)
    ])
    const unlabelled = [...fields].filter(f => !/<Annotation Term="Common.Label" String="[^"]+"\/>/.test(annotationsOf(`${SERVICE}.${entity}/${f}`)))
    expect(unlabelled).toEqual([])
  })

  test('the object page facets point to field groups that exist', () => {
    const targets = all(term(annotations(), 'UI.Facets'), /<PropertyValue Property="Target" AnnotationPath="@UI.FieldGroup#([^"]+)"\/>/g)
    expect(targets.length).toBeGreaterThan(1)
    for (const qualifier of targets) expect([qualifier, annotations().includes(`<Annotation Term="UI.FieldGroup" Qualifier="${qualifier}">`)]).toEqual([qualifier, true])
  })

  test('the header names the message by its event and queue', () => {
    const header = term(annotations(), 'UI.HeaderInfo')
    expect(header).toMatch(/<PropertyValue Property="Title">\s*<Record Type="UI.DataField">\s*<PropertyValue Property="Value" Path="event"\/>/)
    expect(header).toMatch(/<PropertyValue Property="Description">\s*<Record Type="UI.DataField">\s*<PropertyValue Property="Value" Path="target"\/>/)
  })
})

describe('Fiori actions on dead letters', () => {
  test('the list and the object page offer revive and delete, and both are bound actions of DeadOutboxMessages', () => {
    const annotations = annotationsOf(`${SERVICE}.DeadOutboxMessages`)
    const bound = boundActionsOf('DeadOutboxMessages')
    for (const where of ['UI.LineItem', 'UI.Identification']) {
      const actions = all(term(annotations, where), /<PropertyValue Property="Action" String="([^"]+)"\/>/g)
      expect([where, actions]).toEqual([where, ['EventQueuesService.revive', 'EventQueuesService.delete']])
      expect(actions.filter(a => !bound.has(a))).toEqual([])
    }
  })

  test('pending messages offer no actions: only dead letters may be revived or deleted', () => {
    expect(annotationsOf(`${SERVICE}.PendingOutboxMessages`)).not.toContain('UI.DataFieldForAction')
  })
})

const fs = require('fs')
const path = require('path')

/**
 * The documentation is split over README.md, CONTRIBUTING.md and guides in docs/ that link to each other's sections;
 * a section moved or renamed silently breaks every link to it. Every relative link of every Markdown file of the
 * project must name a file that exists and, with `#anchor`, a heading of that file as GitHub renders its anchor.
 * Reads files only, no database: named *.sqlite.test.js so it runs in the SQLite projects and not once per database.
 * Walks the folders instead of asking git, as scripts/test-cds10.sh runs the suite in a copy without .git.
 */
const ROOT = path.join(__dirname, '..', '..')
const SKIP = new Set(['node_modules', 'gen', 'coverage'])

function markdownFiles(dir = ROOT) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap(entry => {
    if (entry.name.startsWith('.') || SKIP.has(entry.name)) return []
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) return markdownFiles(file)
    return entry.name.endsWith('.md') ? [file] : []
  })
}

/** The lines outside fenced code blocks, with inline code spans blanked (a link inside code is no link). */
function prose(text) {
  let fence = null
  return text.split('\n').map(line => {
    const marker = line.match(/^\s*(```+|~~~+)/)
    if (marker) {
      if (!fence) fence = marker[1][0]
      else if (marker[1][0] === fence) fence = null
      return ''
    }
    return fence ? '' : line.replace(/(`+)[^`]*?\1/g, '')
  })
}

/** GitHub's anchor of a heading: its text without markup, lower case, punctuation dropped, spaces as dashes. */
function slug(heading) {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]+>/g, '')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-')
}

function anchors(file) {
  const seen = new Map()
  const result = new Set()
  let fence = null
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const marker = line.match(/^\s*(```+|~~~+)/)
    if (marker) {
      if (!fence) fence = marker[1][0]
      else if (marker[1][0] === fence) fence = null
      continue
    }
    const heading = !fence && line.match(/^#{1,6}\s+(.*?)\s*#*\s*$/)
    if (!heading) continue
    const base = slug(heading[1])
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    result.add(n ? `${base}-${n}` : base)
  }
  return result
}

/** Relative link targets: inline links and images, and reference definitions. */
function links(file) {
  const found = []
  prose(fs.readFileSync(file, 'utf8')).forEach((line, i) => {
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) found.push({ target: m[1], line: i + 1 })
    const definition = line.match(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/)
    if (definition) found.push({ target: definition[1], line: i + 1 })
  })
  return found.filter(({ target }) => !/^[a-z][a-z0-9+.-]*:/i.test(target) && !target.startsWith('//'))
}

function brokenLinks() {
  const cache = new Map()
  const anchorsOf = file => cache.get(file) ?? cache.set(file, anchors(file)).get(file)
  const broken = []
  for (const file of markdownFiles()) {
    for (const { target, line } of links(file)) {
      const [pathPart, anchor] = target.split('#')
      const resolved = pathPart ? path.resolve(path.dirname(file), decodeURIComponent(pathPart)) : file
      const where = `${path.relative(ROOT, file)}:${line}: ${target}`
      if (!fs.existsSync(resolved)) broken.push(`${where} (no file ${path.relative(ROOT, resolved)})`)
      else if (anchor && resolved.endsWith('.md') && !anchorsOf(resolved).has(decodeURIComponent(anchor).toLowerCase())) {
        broken.push(`${where} (no heading #${anchor} in ${path.relative(ROOT, resolved)})`)
      }
    }
  }
  return broken
}

/** The code, its types and its models: where comments and messages point readers to the documentation. */
function codeFiles(dir = ROOT) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap(entry => {
    if (entry.name.startsWith('.') || SKIP.has(entry.name) || ['test', 'bench', 'examples', 'docs'].includes(entry.name)) return []
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) return codeFiles(file)
    const compiled = /\.(js|d\.ts)$/.test(entry.name) && fs.existsSync(file.replace(/\.(js|d\.ts)$/, '.ts'))
    return /\.(ts|js|cds)$/.test(entry.name) && !compiled ? [file] : []
  })
}

/**
 * References from code to the documentation that do not resolve: `docs/<file>.md` or `README.md` (with `#anchor`)
 * must name a file and heading that exist; a bare "README" or "SPEC §" names no place a reader can open (sections
 * moved out of the README; the spec is not part of the repository).
 */
function brokenReferences() {
  const broken = []
  for (const file of codeFiles()) {
    fs.readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
      const where = `${path.relative(ROOT, file)}:${i + 1}`
      for (const m of line.matchAll(/\b((?:docs\/[\w-]+|README)\.md)(#[\w-]+)?/g)) {
        const resolved = path.join(ROOT, m[1])
        if (!fs.existsSync(resolved)) broken.push(`${where}: ${m[0]} (no file)`)
        else if (m[2] && !anchors(resolved).has(m[2].slice(1))) broken.push(`${where}: ${m[0]} (no heading ${m[2]})`)
      }
      const bare = line.replace(/\b(?:[\w/.-]*\/)?README\.md(#[\w-]+)?/g, '')
      if (/\bREADME\b/.test(bare)) broken.push(`${where}: a bare README reference (name docs/<guide>.md#<section> or README.md#<section>)`)
      if (/\bSPEC\s*§/.test(line)) broken.push(`${where}: SPEC § (the spec is not in the repository: name the guide that says it)`)
    })
  }
  return broken
}

describe('documentation links', () => {
  test('the Markdown files are found: README, CONTRIBUTING, the guides, the bench reports', () => {
    const files = markdownFiles().map(f => path.relative(ROOT, f))
    expect(files).toEqual(expect.arrayContaining(['README.md', 'docs/RELIABILITY.md', 'bench/RESULTS.md', 'lib/cap/README.md']))
  })

  test('GitHub anchors: punctuation and code marks dropped, spaces kept as dashes', () => {
    expect(slug("Differences from CAP's built-in queue")).toBe('differences-from-caps-built-in-queue')
    expect(slug("Duplicate delivery: `deliver: 'twice'`")).toBe('duplicate-delivery-deliver-twice')
    expect(slug('Test helpers: `cds-event-queues/test`')).toBe('test-helpers-cds-event-queuestest')
    expect(slug('The consumer half: exactly-once effects between CAP apps')).toBe('the-consumer-half-exactly-once-effects-between-cap-apps')
  })

  test('every relative link names a file that exists and, with #anchor, a heading in it', () => {
    expect(brokenLinks()).toEqual([])
  })

  test('every reference from code, types and models to the documentation names a file and heading that exist', () => {
    expect(codeFiles().map(f => path.relative(ROOT, f))).toEqual(expect.arrayContaining(['db/outbox.cds', 'index.d.ts', 'lib/settings.ts', 'test.ts']))
    expect(brokenReferences()).toEqual([])
  })
})

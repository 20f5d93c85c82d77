const { execFileSync } = require('child_process')
const fs = require('fs')
const path = require('path')

// Adoption before publication (README, Installation): an app that adds the plugin from a packed tarball builds with
// `cds build --production` (@sap/cds-dk, as CAP projects build), and `npm install` in gen/srv finds the tarball.
// CAP copies the app's package.json into gen/srv, where a relative `file:` path would point to the wrong place.
// The app lives under test/.work so that @sap/cds resolves from this repository, as it would from the app's own
// node_modules.
const ROOT = path.join(__dirname, '..', '..')
const run = (cmd, args, cwd) => execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, CDS_CONFIG: '' } })
const npm = (args, cwd) => run(process.platform === 'win32' ? 'npm.cmd' : 'npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], cwd)

let app
beforeAll(() => {
  fs.mkdirSync(path.join(__dirname, '..', '.work'), { recursive: true })
  app = fs.mkdtempSync(path.join(__dirname, '..', '.work', 'tarball-'))
})
afterAll(() => app && fs.rmSync(app, { recursive: true, force: true }))

test('an app depending on the packed tarball builds with cds build --production, and gen/srv installs it', () => {
  const tarball = npm(['pack', '--ignore-scripts', '--pack-destination', app], ROOT).trim().split('\n').pop()
  fs.mkdirSync(path.join(app, 'srv'))
  fs.writeFileSync(path.join(app, 'srv', 'cat.cds'), 'service Catalog { entity Books { key ID : Integer; title : String; } }\n')
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({
    name: 'tarball-app',
    private: true,
    dependencies: { 'cds-event-queues': `file:./${tarball}` },
    cds: { requires: { db: { kind: 'sqlite' }, queue: { pollInterval: '2s' } } }
  }, null, 2))
  npm(['install', '--omit=peer', '--no-package-lock'], app)
  run(process.execPath, [path.join(ROOT, 'node_modules', '@sap', 'cds-dk', 'bin', 'cds.js'), 'build', '--production'], app)

  const gen = path.join(app, 'gen', 'srv')
  const manifest = JSON.parse(fs.readFileSync(path.join(gen, 'package.json'), 'utf8'))
  expect(manifest.dependencies['cds-event-queues']).toBe(`file:${tarball}`)
  expect(fs.existsSync(path.join(gen, tarball))).toBe(true)
  // the plugin's table is in the built model
  expect(fs.readFileSync(path.join(gen, 'srv', 'csn.json'), 'utf8')).toContain('"orderingKey"')
  npm(['install', '--omit=peer', '--no-package-lock'], gen)
  expect(JSON.parse(fs.readFileSync(path.join(gen, 'node_modules', 'cds-event-queues', 'package.json'), 'utf8')).name).toBe('cds-event-queues')
}, 240000)

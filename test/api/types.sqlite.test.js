const { execFileSync } = require('child_process')
const path = require('path')

describe('TypeScript declarations', () => {
  test('the public API type-checks as a TypeScript user writes it (strict)', () => {
    const run = () => execFileSync(process.execPath, [
      require.resolve('typescript/bin/tsc'), '--noEmit', '--strict', '--esModuleInterop', '--skipLibCheck',
      '--module', 'commonjs', '--moduleResolution', 'node', '--target', 'ES2022',
      '--types', 'node,@cap-js/cds-types',
      path.join(__dirname, '..', 'app', 'typescript', 'usage.ts')
    ], { cwd: path.join(__dirname, '..', 'app'), encoding: 'utf8' })
    expect(run).not.toThrow()
  })
})

const { spawn } = require('child_process')
const fs = require('fs')
const path = require('path')
const { APP } = require('./app')

/**
 * Runs the `cds-event-queues` CLI as a child process the way `npx cds-event-queues` does in a project: the bin link
 * npm created in test/app/node_modules/.bin, run by this test's Node, in the project's folder (cds.env from there and
 * from CDS_CONFIG, as the suite set it). `tty: true` runs it under script(1), so its stdout is a terminal.
 * Resolves with its exit code and output; a child still running after `timeout` ms is killed by its PID. The line
 * every command starts with, which database it works on, is `target` (undefined where it stopped before knowing it);
 * `stderr` (on a terminal `stdout`, which has both streams) is what follows.
 */
const BIN = fs.realpathSync(path.join(APP, 'node_modules', '.bin', 'cds-event-queues'))

function runCli(args, { cwd = APP, env = {}, tty = false, timeout = 30000 } = {}) {
  const command = tty ? ['script', ['-qec', [process.execPath, BIN, ...args].map(quote).join(' '), '/dev/null']] : [process.execPath, [BIN, ...args]]
  const child = spawn(command[0], command[1], { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', chunk => (stdout += chunk))
  child.stderr.on('data', chunk => (stderr += chunk))
  const timer = setTimeout(() => process.kill(child.pid, 'SIGKILL'), timeout)
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('close', (code, signal) => {
      clearTimeout(timer)
      if (signal) return reject(new Error(`cds-event-queues ${args.join(' ')} was killed (${signal}):\n${stdout}\n${stderr}`))
      const [target, rest] = tty ? onDatabase(stdout) : onDatabase(stderr)
      resolve(tty ? { code, stdout: rest, stderr, target } : { code, stdout, stderr: rest, target })
    })
  })
}

/** The database a command's first line names, and the output after it. */
function onDatabase(output) {
  const first = output.match(/^cds-event-queues \S+ on (.+)\r?\n/)
  return first ? [first[1], output.slice(first[0].length)] : [undefined, output]
}

const quote = word => `'${String(word).replace(/'/g, "'\\''")}'`

module.exports = { runCli, BIN }

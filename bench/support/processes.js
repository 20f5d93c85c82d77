const { fork } = require('child_process')
const path = require('path')

/** Child processes of the bench: forked Node processes talking over IPC, every one stopped by its PID. */

const BENCH = path.join(__dirname, '..')

/** `execArgv`: Node options of the child (the profiler's `--cpu-prof`). */
function start(script, env, execArgv = process.execArgv) {
  const child = fork(path.join(BENCH, script), [], { env, silent: true, execArgv })
  child.output = ''
  child.stdout.on('data', chunk => (child.output += chunk))
  child.stderr.on('data', chunk => (child.output += chunk))
  return child
}

/** The first IPC message that satisfies `accept`; rejects if the child exits before. */
function nextMessage(child, accept = () => true) {
  return new Promise((resolve, reject) => {
    const onMessage = m => {
      if (!accept(m)) return
      child.off('message', onMessage)
      child.off('exit', onExit)
      resolve(m)
    }
    const onExit = code => {
      child.off('message', onMessage)
      reject(new Error(`${path.basename(child.spawnargs[1] ?? 'child')} exited (${code}):\n${child.output}`))
    }
    child.on('message', onMessage)
    child.once('exit', onExit)
  })
}

/** Runs a script that sends one result and exits. */
async function runOnce(script, env, execArgv) {
  const child = start(script, env, execArgv)
  try {
    return await nextMessage(child)
  } finally {
    await stop(child)
  }
}

/** SIGTERM by PID, SIGKILL after `grace` ms. */
async function stop(child, grace = 5000) {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise(resolve => child.once('exit', resolve))
  process.kill(child.pid, 'SIGTERM')
  const timer = setTimeout(() => child.exitCode === null && process.kill(child.pid, 'SIGKILL'), grace)
  await exited
  clearTimeout(timer)
}

/**
 * A bench script's entry: `child` in the process forked with the environment variable `flag` set (it exits once it
 * sent its figures, or the timers it keeps would hold it), `parent` otherwise; a failure exits 1.
 */
function runScript(flag, child, parent) {
  const inChild = !!process.env[flag]
  ;(inChild ? child : parent)().then(
    () => inChild && process.exit(0),
    e => {
      console.error(e)
      process.exit(1)
    }
  )
}

module.exports = { start, nextMessage, runOnce, stop, runScript }

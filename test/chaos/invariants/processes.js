const { MAX_OLD_SPACE_MB } = require('../processes')

/**
 * I7: each process's heap stays under HEAP_BOUND — its peak, read before every collection (preload.js) — and no process
 * ends by itself; I9: SIGTERM ends a process within its grace.
 */

const MB = 1024 * 1024
/** The stated bound: three quarters of the heap the processes get (`--max-old-space-size`). */
const HEAP_BOUND = (MAX_OLD_SPACE_MB * MB * 3) / 4

function I7(f) {
  const violations = []
  for (const [pid, samples] of f.heap) {
    const peak = Math.max(...samples.map(s => s.heapUsed))
    if (peak > HEAP_BOUND) violations.push({ pids: [pid], text: `process ${pid} used ${(peak / MB).toFixed(0)} MB of heap at ${f.time(samples.find(s => s.heapUsed === peak).at)}, over the bound of ${HEAP_BOUND / MB} MB` })
  }
  for (const p of f.history.processes.filter(p => p.end === 'crashed')) {
    violations.push({ pids: [p.pid], text: `process ${p.pid} (${p.slot}) ended by itself at ${f.time(p.endedAt)} (exit code ${p.code}, signal ${p.signal})${p.readyAt ? '' : ' before it served'}` })
  }
  return violations.map(v => ({ ...v, invariant: 'I7', title: `each process's heap stays under ${HEAP_BOUND / MB} MB (of ${MAX_OLD_SPACE_MB} MB), and no process dies by itself` }))
}

function I9(f) {
  return f.history.processes
    .filter(p => p.end === 'terminated' && (p.termOverdue || p.termMs > p.termLimit))
    .map(p => ({
      invariant: 'I9', title: 'every process ends within its grace on SIGTERM', pids: [p.pid],
      text: `process ${p.pid} (${p.slot}) did not end within ${p.termLimit} ms of SIGTERM (shutdownGrace + slack)${p.termOverdue ? ': killed' : `: ${p.termMs | 0} ms`}`
    }))
}

module.exports = { I7, I9 }

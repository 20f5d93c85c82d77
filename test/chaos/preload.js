/**
 * Loaded with `--require` into every app process the checker starts. It records what the checker needs to judge
 * the process in the remote log (CHAOS_LOG), on the true clock: its start (and clock skew), its heap peaks, and
 * event-loop stalls (a stalled process may lose a lease without any fault). With CHAOS_SKEW_MS it moves the
 * process's `Date` by that many ms, as a host whose clock is off would; `performance` keeps the true time.
 */
const fs = require('fs')
const { GCProfiler } = require('v8')

const file = process.env.CHAOS_LOG
const skew = Number(process.env.CHAOS_SKEW_MS ?? 0)
const trueNow = () => performance.timeOrigin + performance.now()
const record = (type, fields) => fs.appendFileSync(file, JSON.stringify({ type, pid: process.pid, at: trueNow(), ...fields }) + '\n')

if (skew) {
  const RealDate = Date
  function SkewedDate(...args) {
    if (!new.target) return new RealDate(RealDate.now() + skew).toString()
    return args.length ? new RealDate(...args) : new RealDate(RealDate.now() + skew)
  }
  SkewedDate.prototype = RealDate.prototype
  SkewedDate.now = () => RealDate.now() + skew
  SkewedDate.parse = RealDate.parse
  SkewedDate.UTC = RealDate.UTC
  globalThis.Date = SkewedDate
}

record('process', { instance: process.env.CHAOS_INSTANCE, skew })

/** Heap peaks: recorded when they grow by more than this. */
const HEAP_STEP = 16 * 1024 * 1024
/** Stalls: a 100 ms timer that fires this much late. */
const STALL = 1000
/**
 * The heap's true peak, not a sample of it: between two collections the heap only grows, so its peak is what it held
 * right before one of them (V8's GC profiler reports each collection's heap before and after) or what it holds now.
 * A spike between two 100 ms samples, freed by the next collection, is seen too (issue 31: I7 sampled and missed them).
 */
const gcs = new GCProfiler()
gcs.start()
function peakBeforeCollections() {
  const { statistics } = gcs.stop()
  gcs.start()
  return statistics.reduce((max, gc) => Math.max(max, gc.beforeGC.heapStatistics.usedHeapSize), 0)
}
let peak = 0
let peakRss = 0
let last = trueNow()
setInterval(() => {
  const at = trueNow()
  if (at - last - 100 > STALL) record('stall', { ms: Math.round(at - last - 100), from: last })
  last = at
  // maxRSS is the peak the kernel saw, also within a long synchronous stretch between samples
  const heapUsed = Math.max(process.memoryUsage().heapUsed, peakBeforeCollections())
  const maxRSS = process.resourceUsage().maxRSS * 1024
  if (heapUsed > peak + HEAP_STEP || maxRSS > peakRss + HEAP_STEP) {
    peak = Math.max(peak, heapUsed)
    peakRss = Math.max(peakRss, maxRSS)
    record('heap', { heapUsed, maxRSS })
  }
}, 100).unref()

/**
 * Preloaded into an app process (`node --require`, see instances.js `clockSkew`): its wall clock runs CLOCK_SKEW ms
 * ahead (negative: behind), like a machine whose clock NTP does not correct. Only `Date` changes: the monotonic clock
 * (`performance.now()`) and the database's clock are the machine's.
 */
const skew = Number(process.env.CLOCK_SKEW)
const SystemDate = Date

class SkewedDate extends SystemDate {
  constructor(...args) {
    if (args.length === 0) super(SystemDate.now() + skew)
    else super(...args)
  }

  static now() {
    return SystemDate.now() + skew
  }
}

global.Date = SkewedDate

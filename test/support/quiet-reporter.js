const { DefaultReporter } = require('@jest/reporters')

/**
 * jest's default reporter, without the console output of test files that passed: CAP prints its bootstrap, model and
 * request logs in every suite (thousands of lines on a green run), which buried the output of the one that failed.
 * A file with a failing test, or a run with DEBUG set (as CAP's own logging reads it), shows everything as before.
 */
class QuietReporter extends DefaultReporter {
  onTestResult(test, result, aggregated) {
    const failed = result.numFailingTests > 0 || !!result.testExecError
    super.onTestResult(test, failed || process.env.DEBUG ? result : { ...result, console: undefined }, aggregated)
  }
}

module.exports = QuietReporter

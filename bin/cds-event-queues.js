#!/usr/bin/env node
// The CLI lives in lib/cli (TypeScript, compiled); this file only hands it the command line and its exit code.
require('../lib/cli/main')
  .main(process.argv.slice(2))
  .then(code => (process.exitCode = code))

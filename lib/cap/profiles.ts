/**
 * CAP internal: `cds.env['defined-profiles']` lists every profile the configuration defines — `[name]` keys of the
 * project's package.json and .cdsrc files, of its plugins' and of CAP's defaults (development, production, hybrid…) —
 * computed when cds.env is. A profile named on the command line that none of them defines changes nothing.
 * Contract: test/cap/cap-contract.test.js "profiles".
 */
export function definedProfiles(env: object): string[] {
  const defined = (env as Record<string, unknown>)['defined-profiles']
  return Array.isArray(defined) ? defined.map(String) : []
}

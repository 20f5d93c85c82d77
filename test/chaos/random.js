/**
 * A seeded pseudo-random generator (sfc32, seeded through splitmix32), so one seed always gives the same plan.
 * `fork(label)` derives an independent stream: drawing more in one part of the plan does not shift the others.
 */

function splitmix32(a) {
  return () => {
    a = (a + 0x9e3779b9) | 0
    let t = a ^ (a >>> 16)
    t = Math.imul(t, 0x21f0aaad)
    t ^= t >>> 15
    t = Math.imul(t, 0x735a2d97)
    return (t ^ (t >>> 15)) >>> 0
  }
}

function hash(text) {
  let h = 2166136261
  for (const c of text) h = Math.imul(h ^ c.charCodeAt(0), 16777619)
  return h >>> 0
}

function random(seed, label = '') {
  const mix = splitmix32((Number(seed) ^ hash(label)) >>> 0)
  let [a, b, c, d] = [mix(), mix(), mix(), mix()]
  const next = () => {
    const t = (((a + b) | 0) + d) | 0
    d = (d + 1) | 0
    a = b ^ (b >>> 9)
    b = (c + (c << 3)) | 0
    c = (c << 21) | (c >>> 11)
    c = (c + t) | 0
    return (t >>> 0) / 4294967296
  }
  // sfc32's first outputs still echo the seed: discard them
  for (let i = 0; i < 15; i++) next()
  return {
    next,
    /** An integer from `min` to `max`, both included. */
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    chance: p => next() < p,
    pick: list => list[Math.floor(next() * list.length)],
    /** `entries`: [[value, weight], …]. */
    weighted(entries) {
      const total = entries.reduce((sum, [, w]) => sum + w, 0)
      let x = next() * total
      for (const [value, w] of entries) if ((x -= w) < 0) return value
      return entries[entries.length - 1][0]
    },
    fork: name => random(seed, `${label}/${name}`)
  }
}

module.exports = { random }

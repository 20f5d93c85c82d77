import { once } from 'events'

/** What the CLI writes: tables for people, JSON for scripts, a progress bar only where someone watches. */

export interface Streams {
  stdout: NodeJS.WritableStream & { isTTY?: boolean; columns?: number }
  stderr: NodeJS.WritableStream
}

/** Plain left-aligned columns; numbers right-aligned. */
export function table(headers: string[], rows: (string | number)[][]): string {
  const cells = [headers, ...rows.map(r => r.map(String))]
  const widths = headers.map((_, i) => Math.max(...cells.map(r => r[i].length)))
  const numeric = headers.map((_, i) => rows.length > 0 && rows.every(r => typeof r[i] === 'number'))
  const line = (r: string[]) =>
    r.map((cell, i) => (numeric[i] ? cell.padStart(widths[i]) : cell.padEnd(widths[i]))).join('  ').trimEnd()
  return cells.map(line).join('\n') + '\n'
}

/** `3725` → `1h 2m`: the lag as the ops page shows it. */
export function seconds(total: number): string {
  if (total < 60) return `${total}s`
  const minutes = Math.floor(total / 60)
  if (minutes < 60) return total % 60 ? `${minutes}m ${total % 60}s` : `${minutes}m`
  return minutes % 60 ? `${Math.floor(minutes / 60)}h ${minutes % 60}m` : `${minutes / 60}h`
}

/** The first line of an error, cut to `width` characters. */
export function firstLine(text: string | null, width = 60): string {
  const line = (text ?? '').split('\n')[0]
  return line.length > width ? line.slice(0, width - 1) + '…' : line
}

export interface Progress {
  advance(by: number): void
  done(): void
}

const BAR = 30

/**
 * A progress bar on stdout for bulk operations of more than one chunk, redrawn in place; nothing when stdout is not
 * a terminal, so scripts and logs get only the final line.
 */
export function progress(streams: Streams, verb: string, total: number, chunk: number): Progress {
  if (!streams.stdout.isTTY || total <= chunk) return { advance() {}, done() {} }
  let done = 0
  const draw = () => {
    const filled = Math.round((done / total) * BAR)
    streams.stdout.write(`\r[${'#'.repeat(filled)}${'-'.repeat(BAR - filled)}] ${done}/${total} ${verb}`)
  }
  draw()
  return {
    advance(by: number) {
      done += by
      draw()
    },
    done() {
      streams.stdout.write('\n')
    }
  }
}

/**
 * Writes `items` as `JSON.stringify(items, null, 2)` would, each one as `expand` makes it just before it is written, and
 * waits whenever stdout's buffer is full: a list of large items never sits in memory as a whole.
 */
export async function writeJsonArray<T>(streams: Streams, items: T[], expand: (item: T) => Promise<unknown>): Promise<void> {
  const { stdout } = streams
  const write = async (text: string) => void (stdout.write(text) || (await once(stdout, 'drain')))
  if (items.length === 0) return write('[]\n')
  for (const [i, item] of items.entries()) {
    const json = JSON.stringify(await expand(item), null, 2).replace(/\n/g, '\n  ')
    await write(`${i === 0 ? '[' : ','}\n  ${json}`)
  }
  await write('\n]\n')
}

import { createHash } from 'crypto'
import fs from 'fs'
import os from 'os'
import path from 'path'

/**
 * SQLite has one writer at a time: two app processes serving one SQLite file take turns for its write lock, and the
 * queue's handlers hold it while they run (lib/store/dialect.ts), so the other process's requests fail with "database
 * is locked" once SQLite's busy timeout is over. Each app process on a SQLite file marks it with a file of its own in
 * the OS's temporary folder (the file's path hashed; this host only); a process that finds another live one's mark at
 * start says so. A mark left by a process that died is taken over.
 */

/** The process that marked `file` and still lives, if any; then the mark is this process's. */
export function markWriter(file: string): { pid: number } | undefined {
  const mark = markOf(file)
  const other = readMark(mark)
  const live = other !== undefined && other !== process.pid && isAlive(other)
  try {
    fs.writeFileSync(mark, String(process.pid))
  } catch {
    return live ? { pid: other } : undefined // a temporary folder that cannot be written: only the warning is lost
  }
  return live ? { pid: other } : undefined
}

/** Removes this process's mark of `file` (another process's stays). */
export function unmarkWriter(file: string): void {
  const mark = markOf(file)
  if (readMark(mark) === process.pid) fs.rmSync(mark, { force: true })
}

function markOf(file: string): string {
  let real = file
  try {
    real = fs.realpathSync(file)
  } catch {
    // not there yet: its name is what other processes resolve too
  }
  const hash = createHash('sha256').update(real).digest('hex').slice(0, 16)
  return path.join(os.tmpdir(), `cds-event-queues-sqlite-${hash}.pid`)
}

function readMark(mark: string): number | undefined {
  try {
    const pid = Number(fs.readFileSync(mark, 'utf8'))
    return Number.isInteger(pid) && pid > 0 ? pid : undefined
  } catch {
    return undefined
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as { code?: string }).code === 'EPERM'
  }
}

import cds from '@sap/cds'
import fs from 'fs'
import path from 'path'

/**
 * The app's name, from its package.json: the same in every instance of the app, and another app's is another. It
 * names what the app is to others: its consumer group on Redis Streams, the CloudEvents source of its events.
 */
export function appName(): string {
  try {
    const { name } = JSON.parse(fs.readFileSync(path.join(cds.root, 'package.json'), 'utf8')) as { name?: unknown }
    if (typeof name === 'string' && name) return name
  } catch {
    // no package.json: the fallback below
  }
  return 'cap-app'
}

import cds from '@sap/cds'
import { existsSync, readFileSync } from 'fs'
import { basename, join, resolve } from 'path'

/**
 * `cds build` for apps that install this plugin from a packed tarball (`npm add ./cds-event-queues-0.1.0.tgz`,
 * until it is published): CAP copies the app's package.json into gen/srv, where the dependency's relative `file:`
 * path no longer points to the tarball. This build step copies each `file:…tgz` dependency next to gen/srv's
 * package.json and points the dependency there, so `npm install` in gen/srv (what Cloud Foundry and MTA builds run)
 * finds it.
 */

interface Manifest {
  dependencies?: Record<string, string>
}

/** The app's dependencies given as `file:` paths to tarballs, by name: their absolute paths. */
export function tarballDependencies(root: string): Map<string, string> {
  const file = join(root, 'package.json')
  const tarballs = new Map<string, string>()
  if (!existsSync(file)) return tarballs
  const { dependencies = {} } = JSON.parse(readFileSync(file, 'utf8')) as Manifest
  for (const [name, spec] of Object.entries(dependencies)) {
    if (spec.startsWith('file:') && /\.t(ar\.)?gz$/.test(spec)) tarballs.set(name, resolve(root, spec.slice('file:'.length)))
  }
  return tarballs
}

/** What the build step needs of `cds.build.Plugin` (cds-dk's build plugin API, documented in capire). */
interface BuildPlugin {
  task: { dest: string }
  copy(from: string): { to(file: string): Promise<void> }
  write(content: unknown): { to(file: string): Promise<void> }
}

type PluginClass = new () => BuildPlugin
interface Build {
  register?(id: string, plugin: unknown): void
  Plugin: PluginClass
}

/** Registers the build step with `cds build` (`cds.build` exists only there, with @sap/cds-dk installed). */
export function registerTarballBuild(): void {
  const build = (cds as unknown as { build?: Build }).build
  if (!build?.register) return
  build.register('cds-event-queues-tarballs', class TarballDependencies extends build.Plugin {
    static taskDefaults = { src: cds.env.folders.srv }

    static hasTask(): boolean {
      return tarballDependencies(cds.root).size > 0
    }

    /** After CAP's Node.js build has written gen/srv/package.json. */
    get requires(): string[] {
      return ['nodejs']
    }

    async build(): Promise<void> {
      const manifest = join(this.task.dest, 'package.json')
      if (!existsSync(manifest)) return
      const pkg = JSON.parse(readFileSync(manifest, 'utf8')) as Manifest
      for (const [name, tarball] of tarballDependencies(cds.root)) {
        if (!pkg.dependencies?.[name] || !existsSync(tarball)) continue
        await this.copy(tarball).to(basename(tarball))
        pkg.dependencies[name] = `file:${basename(tarball)}`
      }
      await this.write(JSON.stringify(pkg, null, 2)).to('package.json')
    }
  })
}


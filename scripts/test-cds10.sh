#!/usr/bin/env bash
# Runs the test suite (its SQLite and PostgreSQL projects on the native store) on the second supported stack: @sap/cds 10 with @cap-js/sqlite 3 (node:sqlite, no native
# build) on Node 22, which the npm package node@22 provides; @sap/cds-dk 10 (for the HANA artifact checks) and @sap/cds-mtxs 4 (multitenancy) with it. The project is copied to .stacks/cds10 so this stack's
# node_modules never mix with the default (cds 9, Node 20) one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stack="$root/.stacks/cds10"

rm -rf "$stack"
mkdir -p "$stack"
tar -C "$root" --exclude=node_modules --exclude=./.stacks --exclude=./.git -cf - . | tar -C "$stack" -xf -

cd "$stack"
node - <<'JS'
const fs = require('fs')
const pkg = JSON.parse(fs.readFileSync('package.json', 'utf8'))
Object.assign(pkg.devDependencies, { '@sap/cds': '^10', '@sap/cds-dk': '^10', '@sap/cds-mtxs': '^4', '@cap-js/sqlite': '^3', node: '^22' })
pkg.allowScripts = { ...pkg.allowScripts, node: true }
fs.writeFileSync('package.json', JSON.stringify(pkg, null, 2) + '\n')
JS
rm -f package-lock.json
npm install --no-audit --no-fund --loglevel=error

# npm puts node_modules/.bin first on PATH for scripts, so `node` below and inside `npm test` is Node 22.
echo "stack: node $(npx node -v), @sap/cds $(node -p "require('@sap/cds/package.json').version"), @cap-js/sqlite $(node -p "require('@cap-js/sqlite/package.json').version")"
npm exec -- node -e "if (!process.version.startsWith('v22.')) { console.error('expected Node 22, got', process.version); process.exit(1) }"
# The native store's projects only: the portable store is the same CQL on either cds version, and the whole suite
# twice (cds 9 under contention, then cds 10) would take CI near its 90 min.
npm test -- --selectProjects sqlite postgres

#!/usr/bin/env node
// Checks that generated logs are valid for the reference, beyond "the folds do not
// throw": dsh-session's own positional surface fold (`foldSurface`: contiguous seqs,
// surfaceOp only on surface types, replace ranges over current nodes in order,
// provenance and tool/result rewrite rules), its event envelope keys, and its
// known-type-or-ignorable rule. Used by the generator's self-test, not by the
// differential test itself.
//
//   node tests/oracle/validate.mjs PATH...
//
// One JSON line per file: {"file","sessionId","events","digest","faults","error"?}.
// `digest` hashes the decoded events (key order aside), so packed and unpacked writes of one session
// can be shown to decode to the same events.
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, 'node_modules', '@deepseek-ai');
const load = rel => import(pathToFileURL(join(modules, rel)).href);

const usageModule = await load('dsh-token-meter/lib/types/usage-projection.js');
const breakdownModule = await load('dsh-token-meter/lib/types/breakdown-projection.js');
const { decodeStorageRecord } = await load('dsh-session/lib/types/chunk-rows.js');
const { foldSurface } = await load('dsh-session/lib/types/surface.js');
const { KNOWN_SESSION_EVENT_TYPES } = await load('dsh-session/lib/types/known-event-types.js');

const DEFINITIONS = [
  usageModule.contextPressureProjectionDefinition,
  breakdownModule.contextBreakdownProjectionDefinition,
  usageModule.tokenUsageProjectionDefinition,
];
const ENVELOPE_KEYS = new Set(['type', 'seq', 'time', 'data', 'surfaceOp', 'sourceEventSeqs', 'ignorable']);

function expandPaths(paths) {
  const files = [];
  for (const path of paths) {
    if (statSync(path).isDirectory()) {
      const names = readdirSync(path).filter(name => name.endsWith('.jsonl')).sort();
      for (const name of names) files.push(join(path, name));
    } else {
      files.push(path);
    }
  }
  return files;
}

/** JSON text with keys sorted at every level: the digest must not depend on key order. */
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value).sort();
    return `{${keys.map(key => `${JSON.stringify(key)}:${canonical(value[key])}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

function checkEnvelope(event) {
  for (const key of Object.keys(event)) {
    if (!ENVELOPE_KEYS.has(key)) throw new Error(`seq ${event.seq}: envelope key ${key}`);
  }
  if (!Number.isSafeInteger(event.seq) || event.seq < 0) throw new Error(`bad seq ${event.seq}`);
  if (!Number.isSafeInteger(event.time)) throw new Error(`seq ${event.seq}: bad time`);
  if (event.data === undefined) throw new Error(`seq ${event.seq}: no data`);
  if (event.ignorable !== undefined && event.ignorable !== true) {
    throw new Error(`seq ${event.seq}: ignorable must be true`);
  }
  if (!KNOWN_SESSION_EVENT_TYPES.has(event.type) && event.ignorable !== true) {
    throw new Error(`seq ${event.seq}: unknown type ${event.type} without ignorable`);
  }
  if (event.type === 'system/message') throw new Error(`seq ${event.seq}: system/message`);
}

function validate(path) {
  const name = basename(path);
  const result = { file: name, sessionId: undefined, events: 0, digest: undefined, faults: {} };
  try {
    const events = [];
    let first = true;
    for (const line of readFileSync(path, 'utf8').split('\n')) {
      if (line === '') continue;
      const value = JSON.parse(line);
      if (first && value?.type === 'session') {
        result.sessionId = value.id;
        first = false;
        continue;
      }
      first = false;
      events.push(...decodeStorageRecord(value));
    }
    result.events = events.length;
    result.digest = createHash('sha256').update(canonical(events)).digest('hex');
    events.forEach(checkEnvelope);
    foldSurface(events);
    for (const def of DEFINITIONS) {
      let state = def.init();
      for (const event of events) {
        try {
          state = def.apply(state, event);
        } catch (error) {
          result.faults[def.key] = { seq: event.seq, error: error.message };
          break;
        }
      }
    }
  } catch (error) {
    result.error = error instanceof Error ? error.message : String(error);
  }
  return result;
}

const paths = process.argv.slice(2);
if (paths.length === 0) {
  process.stderr.write('usage: node validate.mjs PATH...\n');
  process.exit(2);
}
const lines = expandPaths(paths).map(path => JSON.stringify(validate(path)));
process.stdout.write(lines.map(line => `${line}\n`).join(''));

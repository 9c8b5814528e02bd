#!/usr/bin/env node
// Differential-test oracle: folds dsh session logs through the PUBLISHED reference
// projections (@deepseek-ai/dsh-token-meter@0.1.0-rc.8) and prints exactly what our
// `stream fold` CLI prints, so the two outputs can be compared line by line.
//
//   node tests/oracle/fold.mjs [--every-event] PATH...   per-event or per-file lines
//   node tests/oracle/fold.mjs --bench PATH...            one throughput summary line
//
// PATH is a .jsonl file or a directory of them (non-recursive, sorted by name).
// The reference is only run, never copied: definitions are imported by file path so
// the exact pinned build is what answers.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, 'node_modules', '@deepseek-ai');
const load = rel => import(pathToFileURL(join(modules, rel)).href);

const usageModule = await load('dsh-token-meter/lib/types/usage-projection.js');
const breakdownModule = await load('dsh-token-meter/lib/types/breakdown-projection.js');
const { decodeStorageRecord } = await load('dsh-session/lib/types/chunk-rows.js');

// Output order of the views; also the key order of every printed line.
const DEFINITIONS = [
  usageModule.contextPressureProjectionDefinition,
  breakdownModule.contextBreakdownProjectionDefinition,
  usageModule.tokenUsageProjectionDefinition,
];

function usage(message) {
  process.stderr.write(`${message}\nusage: node fold.mjs [--every-event | --bench] PATH...\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const options = { everyEvent: false, bench: false, paths: [] };
  for (const arg of argv) {
    if (arg === '--every-event') options.everyEvent = true;
    else if (arg === '--bench') options.bench = true;
    else if (arg.startsWith('--')) usage(`unknown option ${arg}`);
    else options.paths.push(arg);
  }
  if (options.paths.length === 0) usage('no PATH given');
  if (options.everyEvent && options.bench) usage('--every-event and --bench exclude each other');
  return options;
}

/** Expand PATH arguments to files: a directory contributes its *.jsonl files sorted by name. */
function expandPaths(paths) {
  const files = [];
  for (const path of paths) {
    if (statSync(path).isDirectory()) {
      const names = readdirSync(path, { withFileTypes: true })
        .filter(entry => entry.isFile() && entry.name.endsWith('.jsonl'))
        .map(entry => entry.name)
        .sort();
      for (const name of names) files.push(join(path, name));
    } else {
      files.push(path);
    }
  }
  return files;
}

/** Session id when the log has no header line: the file name without any extension. */
function idFromFileName(path) {
  const name = basename(path);
  const dot = name.indexOf('.', 1);
  return dot === -1 ? name : name.slice(0, dot);
}

/**
 * Parse one log: the optional `{"type":"session","id"}` header, then one storage
 * record per line, each expanded to its events (packed chunk rows become many).
 * Splits on "\n" only: U+2028/U+2029/U+0085 are legal inside JSON strings.
 */
function readSession(path, text) {
  let sessionId;
  const events = [];
  let first = true;
  for (let line of text.split('\n')) {
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (line.trim() === '') continue;
    let value;
    try {
      value = JSON.parse(line);
    } catch (error) {
      throw new Error(`${path}: unparseable line: ${error.message}`);
    }
    if (first) {
      first = false;
      if (value !== null && typeof value === 'object' && value.type === 'session') {
        sessionId = String(value.id);
        continue;
      }
    }
    for (const event of decodeStorageRecord(value)) events.push(event);
  }
  return { sessionId: sessionId ?? idFromFileName(path), events };
}

/** Per-session fold state: one slot per definition, faulted slots frozen at their last good state. */
function initSlots() {
  return DEFINITIONS.map(def => ({ def, state: def.init(), fault: undefined }));
}

function applyEvent(slots, event) {
  for (const slot of slots) {
    if (slot.fault !== undefined) continue;
    try {
      slot.state = slot.def.apply(slot.state, event);
    } catch (error) {
      // A throw is the reference's "contract violation": the projection stops at
      // its last good state and stays faulted at this seq.
      slot.fault = { seq: event.seq, error: error instanceof Error ? error.message : String(error) };
    }
  }
}

function renderLine(sessionId, seq, slots) {
  const line = { sessionId, seq };
  for (const slot of slots) line[slot.def.key] = slot.def.view(slot.state);
  const faulted = slots.filter(slot => slot.fault !== undefined);
  if (faulted.length > 0) {
    line.faults = Object.fromEntries(faulted.map(slot => [slot.def.key, slot.fault]));
  }
  return JSON.stringify(line);
}

/** Buffer output and flush in large writes: per-event mode prints one line per event. */
class Out {
  constructor() {
    this.parts = [];
    this.size = 0;
  }

  push(line) {
    this.parts.push(line, '\n');
    this.size += line.length + 1;
    if (this.size > 1 << 20) this.flush();
  }

  flush() {
    if (this.parts.length > 0) process.stdout.write(this.parts.join(''));
    this.parts = [];
    this.size = 0;
  }
}

function fold(options) {
  const out = new Out();
  for (const path of expandPaths(options.paths)) {
    const { sessionId, events } = readSession(path, readFileSync(path, 'utf8'));
    const slots = initSlots();
    // The published seq is the highest seq seen so far (contract: "What is published").
    let seen = -1;
    for (const event of events) {
      applyEvent(slots, event);
      seen = Math.max(seen, event.seq);
      if (options.everyEvent) out.push(renderLine(sessionId, seen, slots));
    }
    // A log with no events has no seq to report, so it prints nothing.
    if (!options.everyEvent && events.length > 0) {
      out.push(renderLine(sessionId, seen, slots));
    }
  }
  out.flush();
}

function bench(options) {
  const files = expandPaths(options.paths);
  let events = 0;
  let bytes = 0;
  const start = process.hrtime.bigint();
  for (const path of files) {
    const raw = readFileSync(path);
    bytes += raw.length;
    const session = readSession(path, raw.toString('utf8'));
    const slots = initSlots();
    for (const event of session.events) applyEvent(slots, event);
    events += session.events.length;
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  process.stdout.write(`${JSON.stringify({ events, bytes, seconds })}\n`);
}

const options = parseArgs(process.argv.slice(2));
if (options.bench) bench(options);
else fold(options);

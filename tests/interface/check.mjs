// Checks the published interface (docs/api/): parses asyncapi.yaml with the AsyncAPI parser
// and openapi.yaml with an OpenAPI parser, both strictly (any error or warning fails), and,
// given a JSON file of observed messages, validates each one against the documents' schemas.
//
//   node check.mjs                  parse only
//   node check.mjs observed.json    parse, then validate; prints a JSON report on stdout
//
// An observation is one of
//   {"what", "channel", "key"?, "headers"?, "payload"}   a message of an AsyncAPI channel: it
//       must match exactly one of the channel's messages (payload, headers, Kafka key);
//   {"what", "schema", "value"}                         a value of components.schemas;
//   {"what", "path", "status", "contentType"?, "body"}  an answer of an OpenAPI route.
// Exit status 0 only when both documents parse cleanly and every observation validates.

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { Parser, fromFile } from "@asyncapi/parser";
import { compileErrors, dereference, validate } from "@readme/openapi-parser";
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const API = join(HERE, "..", "..", "docs", "api");

// The parser annotates every schema with x-parser-* keys; Ajv's strict mode (kept on, so a
// misspelt keyword in the documents fails) does not know them.
function plain(value) {
  if (Array.isArray(value)) return value.map(plain);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([name]) => !name.startsWith("x-parser-"))
      .map(([name, inner]) => [name, plain(inner)]),
  );
}

async function parseAsyncApi() {
  const { document, diagnostics } = await fromFile(new Parser(), join(API, "asyncapi.yaml")).parse();
  // Spectral severities: 0 error, 1 warning, 2 information, 3 hint.
  const problems = diagnostics
    .filter((d) => d.severity <= 1)
    .map((d) => `asyncapi.yaml ${d.path.join(".")}: ${d.code}: ${d.message}`);
  return { document, problems };
}

async function parseOpenApi() {
  const path = join(API, "openapi.yaml");
  const result = await validate(path);
  const problems = [];
  if (!result.valid) problems.push(`openapi.yaml: ${compileErrors(result)}`);
  if (result.warnings?.length) problems.push(`openapi.yaml warnings: ${compileErrors(result)}`);
  return { api: result.valid ? await dereference(path) : undefined, problems };
}

class Checker {
  constructor(document, api) {
    this.document = document;
    this.api = api;
    this.draft7 = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true });
    this.draft2020 = new Ajv2020({ allErrors: true, strict: true, allowUnionTypes: true });
    this.compiled = new Map();
  }

  compile(ajv, schema) {
    if (!this.compiled.has(schema)) this.compiled.set(schema, ajv.compile(plain(schema)));
    return this.compiled.get(schema);
  }

  // Errors of `value` against an AsyncAPI schema model (undefined: no schema, value absent).
  schemaErrors(model, value, where) {
    if (!model) return value === undefined || Object.keys(value ?? {}).length === 0 ? [] : [`${where}: none expected`];
    const check = this.compile(this.draft7, model.json());
    return check(value) ? [] : check.errors.map((e) => `${where}${e.instancePath} ${e.message}`);
  }

  message(observation) {
    const channel = this.document.channels().get(observation.channel);
    if (!channel) return { errors: [`no channel ${observation.channel}`] };
    const tried = [];
    const matched = [];
    for (const message of channel.messages().all()) {
      const errors = [
        ...this.schemaErrors(message.payload(), observation.payload, "payload"),
        ...this.schemaErrors(message.headers(), observation.headers ?? {}, "headers"),
      ];
      const kafka = message.bindings().get("kafka")?.value();
      if (kafka?.key && "key" in observation) {
        const check = this.compile(this.draft7, kafka.key);
        if (!check(observation.key)) errors.push(...check.errors.map((e) => `key ${e.message}`));
      }
      if (errors.length === 0) matched.push(message.id());
      tried.push(`${message.id()}: ${errors.join("; ")}`);
    }
    if (matched.length === 1) return { matched: `${observation.channel}/${matched[0]}`, errors: [] };
    if (matched.length > 1) return { errors: [`matches ${matched.join(" and ")}: ambiguous`] };
    return { errors: tried };
  }

  schema(observation) {
    const model = this.document.components().schemas().get(observation.schema);
    if (!model) return { errors: [`no schema ${observation.schema}`] };
    const errors = this.schemaErrors(model, observation.value, "value");
    return { matched: `schema/${observation.schema}`, errors };
  }

  // An answer of a route: the document must list its status with its media type (the
  // Content-Type's, parameters dropped; JSON when not given), and a JSON body must fit.
  http(observation) {
    const response = this.api.paths[observation.path]?.get?.responses?.[String(observation.status)];
    const type = (observation.contentType ?? "application/json").split(";")[0].trim();
    const matched = `GET ${observation.path} ${observation.status} ${type}`;
    const media = response?.content?.[type];
    if (!media) return { errors: [`no ${type} answer ${observation.status} for ${observation.path}`] };
    if (type !== "application/json") return { matched, errors: [] };
    const check = this.compile(this.draft2020, media.schema);
    const errors = check(observation.body) ? [] : check.errors.map((e) => `body${e.instancePath} ${e.message}`);
    return { matched, errors };
  }

  check(observation) {
    if ("channel" in observation) return this.message(observation);
    if ("schema" in observation) return this.schema(observation);
    return this.http(observation);
  }
}

const { document, problems: asyncProblems } = await parseAsyncApi();
const { api, problems: openProblems } = await parseOpenApi();
const problems = [...asyncProblems, ...openProblems];
if (!document) problems.push("asyncapi.yaml did not parse");
const report = { problems, matched: {}, failures: [] };
if (process.argv[2] && document && api) {
  const checker = new Checker(document, api);
  for (const observation of JSON.parse(readFileSync(process.argv[2], "utf8"))) {
    let result;
    try {
      result = checker.check(observation);
    } catch (error) {
      result = { errors: [`the schema does not compile: ${error.message}`] };
    }
    const { matched, errors } = result;
    if (errors.length) report.failures.push({ what: observation.what, errors });
    else report.matched[matched] = (report.matched[matched] ?? 0) + 1;
  }
}
console.log(JSON.stringify(report, null, 1));
process.exit(problems.length || report.failures.length ? 1 : 0);

// Generates options.d.ts (the TypeScript types of the options) from the JSON
// Schema the Rust build derives from the option declaration, so the two
// cannot disagree. `node scripts/options-types.js` rewrites the file; the
// test suite checks that the committed file matches.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const SCHEMA = new URL('../../options.schema.json', import.meta.url);
export const OUTPUT = new URL('../options.d.ts', import.meta.url);

const TS_TYPES = { integer: 'number', string: 'string', null: 'null', boolean: 'boolean' };

/** Interfaces of nested mappings, by property name (see `objectType`). */
const NESTED = {
  sentinel: 'RedisSentinelOptions',
  cluster: 'RedisClusterOptions',
  tls: 'RedisTlsOptions',
  rules: 'PolicyRuleOptions',
  default: 'PolicyDefaultRuleOptions',
};

function tsType(property, name) {
  if (property.const !== undefined) return JSON.stringify(property.const);
  if (property.enum !== undefined) return property.enum.map((choice) => JSON.stringify(choice)).join(' | ');
  // A list of mappings takes the interface name of its field.
  if (property.type === 'array') return `readonly ${tsType(property.items, property.items.type === 'object' ? name : undefined)}[]`;
  if (property.type === 'object') {
    if (NESTED[name] === undefined) throw new Error(`options-types: no interface name for the mapping ${name}`);
    return NESTED[name];
  }
  const types = [property.type].flat().map((type) => TS_TYPES[type]);
  if (types.length === 0 || types.includes(undefined)) throw new Error(`options-types: no TypeScript type for ${JSON.stringify(property)}`);
  return types.join(' | ');
}

function doc(property) {
  const lines = [];
  if (property.description) lines.push(property.description);
  if ([property.type].flat().includes('integer')) lines.push(`Integer from ${property.minimum} to ${property.maximum}.`);
  if (property.pattern) lines.push(`Matches \`${property.pattern}\`.`);
  if (property.items?.pattern) lines.push(`Each matches \`${property.items.pattern}\`.`);
  if (property.default !== undefined) lines.push(`@default ${JSON.stringify(property.default)}`);
  return lines.length === 0 ? '' : `  /**\n${lines.map((l) => `   * ${l}`).join('\n')}\n   */\n`;
}

function objectType(name, schema, omit = []) {
  const required = new Set(schema.required ?? []);
  const fields = Object.entries(schema.properties)
    .filter(([field]) => !omit.includes(field))
    .map(([field, property]) => `${doc(property)}  readonly ${field}${required.has(field) ? '' : '?'}: ${tsType(property, field)};`);
  return `export interface ${name} {\n${fields.join('\n')}\n}\n`;
}

/**
 * A connection: the common fields, and exactly one of the endpoint fields
 * the schema's `oneOf` names (the others typed `never`, so TypeScript
 * rejects two at once).
 */
function connectionTypes(schema) {
  const endpoints = schema.oneOf.map((choice) => choice.required[0]);
  // The endpoints' mappings, then the other mappings every connection may have (tls).
  const others = Object.keys(schema.properties).filter((field) => !endpoints.includes(field));
  const nested = [...endpoints, ...others]
    .filter((field) => schema.properties[field].type === 'object')
    .map((field) => [`/** \`connections.<name>.${field}\`. */`, objectType(NESTED[field], schema.properties[field])].join('\n'));
  const choices = endpoints.map((field) => {
    const others = endpoints.filter((other) => other !== field).map((other) => `readonly ${other}?: never`);
    return `  | (RedisConnectionCommon & {\n${doc(schema.properties[field]).replaceAll('\n  ', '\n    ').replace(/^  /, '    ')}    readonly ${field}: ${tsType(schema.properties[field], field)};\n    ${others.join(';\n    ')};\n  })`;
  });
  return [
    ...nested,
    '/** The fields every connection has. */',
    objectType('RedisConnectionCommon', schema, endpoints),
    `/** A Redis connection under \`dokebi-redis.connections.<name>\`: exactly one of ${endpoints.join(', ')}. */`,
    `export type RedisConnectionOptions =\n${choices.join('\n')};\n`,
  ].join('\n');
}

/**
 * A policy backend and its rules: a rule of `rules` has exactly one of the
 * pattern fields the schema's `oneOf` names (the other typed `never`).
 */
function policyTypes(schema) {
  const rule = schema.properties.rules.items;
  const patterns = rule.oneOf.map((choice) => choice.required[0]);
  const choices = patterns.map((field) => {
    const others = patterns.filter((other) => other !== field).map((other) => `readonly ${other}?: never`);
    return `  | (PolicyDefaultRuleOptions & {\n${doc(rule.properties[field]).replaceAll('\n  ', '\n    ').replace(/^  /, '    ')}    readonly ${field}: string;\n    ${others.join(';\n    ')};\n  })`;
  });
  return [
    '/** The rule of the keys no other rule of a policy takes (`default`), and the fields of every rule. */',
    objectType(NESTED.default, schema.properties.default),
    `/** One entry of a policy's \`rules\`: exactly one of ${patterns.join(', ')}. */`,
    `export type ${NESTED.rules} =\n${choices.join('\n')};\n`,
    '/** A `driver: policy` backend: other backends of the options, chosen per key by rules. */',
    objectType('PolicyBackendOptions', schema),
  ].join('\n');
}

/** The text of options.d.ts for `schema`. */
export function render(schema) {
  const options = schema.properties.options.properties;
  const [local, redis, file, app, postgres, mysql, policy] = options['dokebi-lock'].properties.backends.additionalProperties.anyOf;
  const connection = options['dokebi-redis'].properties.connections.additionalProperties;
  const postgresConnection = options['dokebi-postgres'].properties.connections.additionalProperties;
  const mysqlConnection = options['dokebi-mysql'].properties.connections.additionalProperties;
  if (app.properties.driver.type !== 'string') throw new Error('options-types: unexpected app driver schema');
  if (postgres.properties.driver.const !== 'postgres') throw new Error('options-types: unexpected postgres backend schema');
  if (policy.properties.driver.const !== 'policy') throw new Error('options-types: unexpected policy backend schema');
  if (mysql.properties.driver.const !== 'mysql') throw new Error('options-types: unexpected mysql backend schema');
  return [
    '// Generated by npm/scripts/options-types.js from options.schema.json. Do not edit.',
    '',
    '/** A `driver: local` backend (the default driver). */',
    objectType('LocalBackendOptions', local),
    '/** A `driver: redis` backend. */',
    objectType('RedisBackendOptions', redis),
    '/** A `driver: postgres` backend: leases in a PostgreSQL table. */',
    objectType('PostgresBackendOptions', postgres),
    '/** A `driver: mysql` backend: leases in a MySQL or MariaDB table. */',
    objectType('MysqlBackendOptions', mysql),
    '/** A `driver: file` backend: kernel locks on files of one directory, for the processes of one host. */',
    objectType('FileBackendOptions', file),
    policyTypes(policy),
    [
      '/**',
      ' * The settings of app drivers by driver name. An app that types its options',
      ' * declares its drivers here, e.g.',
      " * `declare module '@dokebi/lock' { interface AppDriverSettings { sqlite: { readonly file: string } } }`.",
      ' * A backend of an undeclared driver does not type-check, so a mistyped option',
      ' * of a built-in driver is never taken for a setting of an app driver.',
      ' */',
      'export interface AppDriverSettings {}\n',
    ].join('\n'),
    '/** A backend of an app driver declared in AppDriverSettings; the driver validates its settings at run time. */',
    'export type AppBackendOptions = {\n  [D in keyof AppDriverSettings]: { readonly driver: D } & AppDriverSettings[D];\n}[keyof AppDriverSettings];\n',
    '/** One backend under `dokebi-lock.backends.<name>` (null: every default). */',
    'export type BackendOptions =\n  | LocalBackendOptions\n  | RedisBackendOptions\n  | PostgresBackendOptions\n  | MysqlBackendOptions\n  | FileBackendOptions\n  | PolicyBackendOptions\n  | AppBackendOptions\n  | null;\n',
    connectionTypes(connection),
    '/** The `dokebi-lock` section of the options. */',
    `export interface LockOptions {\n  readonly backends?: Readonly<Record<string, BackendOptions>>;\n  /**\n   * ${options['dokebi-lock'].properties.holder.description}\n   */\n  readonly holder?: string;\n}\n`,
    '/** The `dokebi-redis` section of the options. */',
    'export interface RedisOptions {\n  readonly connections?: Readonly<Record<string, RedisConnectionOptions>>;\n}\n',
    '/** A PostgreSQL connection under `dokebi-postgres.connections.<name>`. */',
    objectType('PostgresConnectionOptions', postgresConnection),
    '/** The `dokebi-postgres` section of the options. */',
    'export interface PostgresOptions {\n  readonly connections?: Readonly<Record<string, PostgresConnectionOptions>>;\n}\n',
    '/** A MySQL or MariaDB connection under `dokebi-mysql.connections.<name>`. */',
    objectType('MysqlConnectionOptions', mysqlConnection),
    '/** The `dokebi-mysql` section of the options. */',
    'export interface MysqlOptions {\n  readonly connections?: Readonly<Record<string, MysqlConnectionOptions>>;\n}\n',
    '/** The `options` map of the YAML file, as far as @dokebi/lock reads it. */',
    "export interface LockConfig {\n  readonly 'dokebi-lock'?: LockOptions;\n  readonly 'dokebi-redis'?: RedisOptions;\n  readonly 'dokebi-postgres'?: PostgresOptions;\n  readonly 'dokebi-mysql'?: MysqlOptions;\n  readonly [plugin: string]: unknown;\n}\n",
  ].join('\n');
}

export function readSchema() {
  return JSON.parse(readFileSync(SCHEMA, 'utf8'));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(OUTPUT, render(readSchema()));
}

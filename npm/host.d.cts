// Types of @dokebi/lock/host for `require`: the declarations of host.d.ts
// (see index.d.cts).
type Host = typeof import('./host.js', { with: { 'resolution-mode': 'import' } });

export type * from './host.js' with { 'resolution-mode': 'import' };

export declare const createApp: Host['createApp'];

// Types of @dokebi/lock/otel for `require`: the declarations of otel.d.ts
// (see index.d.cts).
type Otel = typeof import('./otel.js', { with: { 'resolution-mode': 'import' } });

export type * from './otel.js' with { 'resolution-mode': 'import' };

export declare const instrumentLocks: Otel['instrumentLocks'];

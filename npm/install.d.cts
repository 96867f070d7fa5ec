// Types of @dokebi/lock/install for `require`: the declarations of
// install.d.ts (see index.d.cts).
type Install = typeof import('./install.js', { with: { 'resolution-mode': 'import' } });

export type * from './install.js' with { 'resolution-mode': 'import' };

export declare const manifest: Install['manifest'];
export declare const planInstall: Install['planInstall'];
export declare const check: Install['check'];

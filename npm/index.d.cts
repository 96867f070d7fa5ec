// Types of @dokebi/lock for `require` (the `require` condition of the package's
// exports). index.cjs is the ES module itself (Node 24 requires it
// synchronously), so these are the declarations of index.d.ts, not a copy of
// them: one LockError, LockProvider and LockExtension type for ESM and
// CommonJS code alike. Every value export of index.d.ts is listed here once
// (npm/test/types.test.js checks the list).
type Lock = typeof import('./index.js', { with: { 'resolution-mode': 'import' } });

export type * from './index.js' with { 'resolution-mode': 'import' };

export declare const openLock: Lock['openLock'];
export declare const createPlugin: Lock['createPlugin'];
export declare const defineLockPlugin: Lock['defineLockPlugin'];
export declare const dependency: Lock['dependency'];
export declare const redisDependency: Lock['redisDependency'];
export declare const postgresDependency: Lock['postgresDependency'];
export declare const mysqlDependency: Lock['mysqlDependency'];
export declare const DokebiError: Lock['DokebiError'];
export type DokebiError = import('./index.js', { with: { 'resolution-mode': 'import' } }).DokebiError;
export declare const LockError: Lock['LockError'];
export type LockError = import('./index.js', { with: { 'resolution-mode': 'import' } }).LockError;
export declare const LockProvider: Lock['LockProvider'];
export type LockProvider = import('./index.js', { with: { 'resolution-mode': 'import' } }).LockProvider;
export declare const LockExtension: Lock['LockExtension'];
export type LockExtension = import('./index.js', { with: { 'resolution-mode': 'import' } }).LockExtension;

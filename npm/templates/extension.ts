// The extension entry of @dokebi/lock. `dokebi add @dokebi/lock` created this
// file and will not touch it again: it is yours. Left as it is, it changes
// nothing and costs nothing (a hook you do not override is never called).
//
// Override any of the three hooks, e.g.
//   protected override wrapBackend(input: WrapBackendInput): DriverBackend { ... }
// and add app drivers (used as `driver: <name>` in the YAML) with
//   export const drivers: LockDrivers = { name: (input) => ({ view, close }) };
// A backend you return needs only acquire(key, options): the library adds
// withLock and status where they are missing.
// See the "Extensions" section of the @dokebi/lock README and examples/29-extension.
import { LockExtension } from '@dokebi/lock';

export default class AppLockExtension extends LockExtension {}

// @dokebi/lock-mysql: the marker package of driver: mysql. The mysql
// driver is compiled into the native addon of @dokebi/lock; installing this
// package is how a dokebi app declares that it uses it (createPlugin checks
// that it resolves, `check` of @dokebi/lock/install reports it missing).
export const driver = 'mysql';

/*
 * service.h — what a daemon tells its service manager (systemd's
 * sd_notify protocol): ready, reloading, alive. Without $NOTIFY_SOCKET
 * (started by hand, by a test, by another supervisor) every call does
 * nothing.
 */
#ifndef OG_SERVICE_H
#define OG_SERVICE_H

/* READY=1 with a STATUS= line: start-up is complete. */
void service_ready(const char *status);
/* STATUS= alone: what `systemctl status` shows (e.g. why it does not
 * serve). */
void service_status(const char *status);
/* RELOADING=1: a SIGHUP reload began; service_ready() again when done. */
void service_reloading(void);
/* STOPPING=1: shutdown began. */
void service_stopping(void);
/* Half the watchdog interval the manager asked for (WatchdogSec=), in
 * milliseconds; 0 when no watchdog is set. */
long service_watchdog_ms(void);
/* WATCHDOG=1: the main loop is alive. */
void service_alive(void);
/* Prints "PROGRAM (oncegate) VERSION" to stdout, for --version. */
void service_version(const char *program);

#endif

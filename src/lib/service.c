/*
 * service.c — the sd_notify side of the daemons; see service.h.
 */
#include <stdint.h>
#include <stdio.h>

#include <systemd/sd-daemon.h>

#include "service.h"

void
service_ready(const char *status)
{
	(void)sd_notifyf(0, "READY=1\nSTATUS=%s", status != NULL ? status : "running");
}

void
service_status(const char *status)
{
	(void)sd_notifyf(0, "STATUS=%s", status);
}

void
service_reloading(void)
{
	(void)sd_notify(0, "RELOADING=1\nSTATUS=reloading");
}

void
service_stopping(void)
{
	(void)sd_notify(0, "STOPPING=1\nSTATUS=stopping");
}

long
service_watchdog_ms(void)
{
	uint64_t usec = 0;

	if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
		return 0;
	/* ping twice per interval */
	return usec >= 2000 ? (long)(usec / 2000) : 1;
}

void
service_alive(void)
{
	(void)sd_notify(0, "WATCHDOG=1");
}

void
service_version(const char *program)
{
	printf("%s (oncegate) %s\n", program, PACKAGE_VERSION);
}

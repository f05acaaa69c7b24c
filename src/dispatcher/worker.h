/*
 * worker.h — one worker thread of oncegate-dispatch (worker.c): its own
 * database connection and libcurl handle, one effect at a time.
 */
#ifndef OG_WORKER_H
#define OG_WORKER_H

/* The thread's loop; returns when stopping is set and its work is finished
 * or released. arg: struct dispatch_shared * (dispatch.h). */
void *worker_main(void *arg);

#endif

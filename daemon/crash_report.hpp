#pragma once
//! A last word from a crashing process: on SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT the handler
//! writes "framefused: fatal signal N (NAME) in thread T" and the raw backtrace (return addresses,
//! as `binary(+offset)[address]` lines that `addr2line -e BINARY -f -C OFFSET` resolves) to
//! stderr (the journal under systemd, `docker logs` in a container), then lets the signal take its
//! default action: the process still dies by that signal (core dump, exit status, restart policy).
//! The handler calls only async-signal-safe functions (backtrace() is primed at install, so it
//! allocates nothing then); on the installing thread it runs on an alternate stack, so a stack
//! overflow there is reported too.

namespace framefuse::daemon {

//! Installs the handler for the process (idempotent). Call once, early in main().
void install_crash_report();

}  // namespace framefuse::daemon

// The port relay (see port-relay.c): one helper connection = one TCP connection to a port of the
// sandbox's own loopback.
#ifndef SBX_PORT_RELAY_H
#define SBX_PORT_RELAY_H
#include <stdint.h>

// Serves the 'T' request whose payload (len bytes, the port in decimal) was already read from
// sock: connects, answers 'C' or 'F', then relays bytes both ways until both ends closed. Never
// returns (the relay process exits).
void port_relay(int sock, const char *payload, uint32_t len) __attribute__((noreturn));

#endif

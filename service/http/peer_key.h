/*
 * peer_key: what a client address is counted under, and the seeded hash of
 * the per-address tables.
 *
 * An IPv6 subscriber usually holds a whole /64, so counting its addresses
 * one by one would give it 2^64 places under every per-address limit.  The
 * per-address connection cap (server.c) and the per-address rate limits
 * (limits.c) both ask peer_key_of(), so they always count the same client.
 *
 * A table keyed by client addresses is filled by the clients: with a hash
 * everyone can compute, one client could aim all its keys at one chain.  So
 * each table is seeded from the kernel's random source, once per process.
 * Pure but for peer_key_seed().
 */
#ifndef SECKILL_PEER_KEY_H
#define SECKILL_PEER_KEY_H

#include <stddef.h>
#include <stdint.h>

/* Room for any key peer_key_of() writes, with its NUL ("xxxx:...::" of a
 * /64, or an address as the socket shows it). */
#define PEER_KEY_MAX 48

/* Writes addr's key into out (cap >= PEER_KEY_MAX): an IPv6 address cut to
 * its /64 ("2001:db8:1:2::"), an IPv4 one (or an IPv4-mapped IPv6 one, or
 * any text that is no IPv6 address) as it is. */
void peer_key_of(const char *addr, char *out, size_t cap);

/* 64 random bits from getrandom(); if the kernel gives none, bits of the
 * clock and the address space (still different per process). */
uint64_t peer_key_seed(void);

/* The hash of key under seed: the same key and seed always give the same
 * value; another seed scatters keys otherwise.  Not a cryptographic MAC:
 * with a secret seed, a client cannot predict which keys share a chain. */
uint64_t peer_key_hash(uint64_t seed, const char *key);

#endif

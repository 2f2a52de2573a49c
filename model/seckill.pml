/*
 * seckill.pml: the order protocol of this repository as a Promela model,
 * checked exhaustively by spin (`make model`; model/README.md says what it
 * covers, what it leaves out, and how each re-inserted bug is found).
 *
 * One SKU, a stock of STOCK0 units, a per-user limit of 1, orders of 1 unit.
 * Redis and PostgreSQL are global state; every Lua script is one atomic step
 * (Redis runs a script alone); every PostgreSQL transaction that only reads
 * and writes the database under the SKU's row lock is one atomic step too
 * (the fenced row lock serialises them, so nothing can tell it apart from a
 * slower one).  Between any two steps a process may pause for as long as the
 * others need: a lock's lease may run out meanwhile (Leases), Redis may fail
 * over to a replica that lacks the newest writes (Failover), and so on.
 *
 * Compile-time switches:
 *   SCEN=1..9  which processes run (the table below; model/check.sh runs
 *           them all): two buyers (one in scenario 7), one or two order
 *           writers, and some of: a Redis failover that loses the
 *           unreplicated suffix of writes, rebuilds, cancels, the expiry
 *           sweeper, an admin delta, leases that run out, a settler of
 *           recorded 202s.  Each of NBUYERS, NWRITERS, WBATCHES, FAILOVER,
 *           NREBUILDS, RETRY, CANCEL, SWEEPER, ADMIN, MAXEXPIRE, SETTLER
 *           may be overridden with -D.
 *   BUG1 .. BUG5  put one of issue 24's bugs back (see README.md).
 *   GAP_ACK, GAP_LOAD  two gaps this model found in main at cc7e017 (README.md).
 *   NO_PENDING_RECORD  issue 24's item 5 put back: a 202 is answered
 *           without being recorded in PostgreSQL first (main at cc7e017),
 *           so nobody settles a 202 whose reservation Redis lost; with
 *           PENDING_NEVER_LOST that is checked too (the run item5).
 *   RESTORE_BEFORE_LOAD  a rebuild writes recorded 202s' keys back from its
 *           transaction, before COMMIT and before its load installs the new
 *           epoch (main before the write-back moved into sku_load.lua): a
 *           promoted replica still selling under the old epoch issues the
 *           id again (the run restore-before-load, scenario 9).
 */

#ifndef SCEN
#define SCEN 1
#endif

#if SCEN == 1   /* failover-retry: a failover, buyers who retry under their key */
#define S_BUYERS 2
#define S_WRITERS 1
#define S_BATCHES 2
#define S_FAILOVER 1
#define S_REBUILDS 0
#define S_RETRY 1
#define S_CANCEL 0
#define S_SWEEPER 0
#define S_ADMIN 0
#define S_EXPIRE 1
#define S_SETTLER 0        /* with one: over 34 million states, past 3 GB */
#elif SCEN == 2   /* failover-rebuild: a failover and a rebuild */
#define S_BUYERS 2
#define S_WRITERS 1
#define S_BATCHES 2
#define S_FAILOVER 1
#define S_REBUILDS 1
#define S_RETRY 0
#define S_CANCEL 0
#define S_SWEEPER 0
#define S_ADMIN 0
#define S_EXPIRE 0
#define S_SETTLER 0
#elif SCEN == 3   /* two-writers: two writers, a failover, a lease that ends */
#define S_BUYERS 2
#define S_WRITERS 2
#define S_BATCHES 1
#define S_FAILOVER 1
#define S_REBUILDS 0
#define S_RETRY 0
#define S_CANCEL 0
#define S_SWEEPER 0
#define S_ADMIN 0
#define S_EXPIRE 1
#define S_SETTLER 0
#elif SCEN == 4   /* rebuilds: two rebuilds racing, leases that end */
#define S_BUYERS 2
#define S_WRITERS 1
#define S_BATCHES 2
#define S_FAILOVER 0
#define S_REBUILDS 2
#define S_RETRY 0
#define S_CANCEL 0
#define S_SWEEPER 0
#define S_ADMIN 0
#define S_EXPIRE 2
#define S_SETTLER 0
#elif SCEN == 5   /* cancel: a buyer cancels, a rebuild, a lease that ends */
#define S_BUYERS 2
#define S_WRITERS 1
#define S_BATCHES 2
#define S_FAILOVER 0
#define S_REBUILDS 1
#define S_RETRY 0
#define S_CANCEL 1
#define S_SWEEPER 0
#define S_ADMIN 0
#define S_EXPIRE 1
#define S_SETTLER 0
#elif SCEN == 6   /* expiry-adjust: the sweeper, an admin delta, a lease that ends */
#define S_BUYERS 2
#define S_WRITERS 1
#define S_BATCHES 2
#define S_FAILOVER 0
#define S_REBUILDS 0
#define S_RETRY 0
#define S_CANCEL 0
#define S_SWEEPER 1
#define S_ADMIN 1
#define S_EXPIRE 1
#define S_SETTLER 0
#elif SCEN == 7   /* cancel-failover: one buyer cancels, then retries after a failover */
#define S_BUYERS 1
#define S_WRITERS 1
#define S_BATCHES 2
#define S_FAILOVER 1
#define S_REBUILDS 0
#define S_RETRY 1
#define S_CANCEL 1
#define S_SWEEPER 0
#define S_ADMIN 0
#define S_EXPIRE 0
#define S_SETTLER 1
#elif SCEN == 8   /* adjust-rebuild: an admin delta, a rebuild, a lease that ends */
#define S_BUYERS 2
#define S_WRITERS 1
#define S_BATCHES 2
#define S_FAILOVER 0
#define S_REBUILDS 1
#define S_RETRY 0
#define S_CANCEL 0
#define S_SWEEPER 0
#define S_ADMIN 1
#define S_EXPIRE 1
#define S_SETTLER 0
#elif SCEN == 9   /* failover-restore: a failover, a rebuild that writes 202s' keys back, buyers who retry */
#define S_BUYERS 2
#define S_WRITERS 1
#define S_BATCHES 1
#define S_FAILOVER 1
#define S_REBUILDS 1
#define S_RETRY 1
#define S_CANCEL 0
#define S_SWEEPER 0
#define S_ADMIN 0
#define S_EXPIRE 0
#define S_SETTLER 0
#endif

/* each may be overridden with -D */
#ifndef NBUYERS
#define NBUYERS S_BUYERS
#endif
#ifndef NWRITERS
#define NWRITERS S_WRITERS
#endif
#ifndef FAILOVER
#define FAILOVER S_FAILOVER
#endif
#ifndef NREBUILDS
#define NREBUILDS S_REBUILDS
#endif
#ifndef RETRY
#define RETRY S_RETRY
#endif
#ifndef CANCEL
#define CANCEL S_CANCEL
#endif
#ifndef SWEEPER
#define SWEEPER S_SWEEPER
#endif
#ifndef ADMIN
#define ADMIN S_ADMIN
#endif
#ifndef MAXEXPIRE
#define MAXEXPIRE S_EXPIRE
#endif
#ifndef WBATCHES
#define WBATCHES S_BATCHES
#endif
#ifndef SETTLER
#define SETTLER S_SETTLER
#endif
#ifndef NO_PENDING_RECORD
#define PENDING_RECORD 1   /* issue 24 item 5's fix: a 202 is recorded first */
#else
#define PENDING_RECORD 0
#endif

/* ---- sizes ----------------------------------------------------------------- */

#define NU      2          /* buyers: users 1 and 2 */
#define K       5          /* order ids per epoch: id = epoch * K + seq, seq 1..K-1 */
#define MAXEP   4          /* epochs 1..MAXEP-1 (1: the SKU's creation) */
#define NID     (MAXEP * K)
#define NE      6          /* stream entry ids 1..NE-1 (Redis never issues one twice) */
#define ND      4          /* debts */
#define NCR     2          /* cancel requests */
#define NREC    4          /* order_pending records (at most two 202s per buyer) */
#define STOCK0  2
#define LIMIT   1
#define EPOCH(id) ((id) / K)

/* ---- Redis ------------------------------------------------------------------ */

/* journal states (seckill:{sku}:journal, written by reserve.lua) */
#define J_NONE      0
#define J_PENDING   1      /* 'pending:<user>:<entry>' */
#define J_RETURNED  2      /* 'returned:<reason>': rejected, dead-lettered or cancelled */
#define J_REAPPLIED 3      /* BUG2 only: 'reapplied:<epoch>' under the order id alone */

typedef Journal {
    unsigned kind  : 2;
    unsigned user  : 2;
    unsigned entry : 3;
    unsigned ep    : 3;    /* J_REAPPLIED: the load epoch */
}

/* a debt (seckill:{sku}:debts "<epoch>:<order>[:return]" -> "<user>:<qty>"):
 * a take (orders_reapply.lua) or a give-back (order_release.lua) owed to a
 * load that Redis does not hold yet */
typedef Debt {
    unsigned ep   : 3;
    unsigned id   : 5;
    unsigned user : 2;
    bit give;              /* 1: units given back (qty -1), 0: taken (+1) */
    bit used;
}

typedef Redis {
    byte loaded;           /* meta 'loaded' (= 'epoch'): 0, the SKU is not loaded */
    byte built_run;        /* meta 'built_run': the Redis run this state was built on */
    short stock;
    byte seq;
    short bought[NU + 1];  /* units held per buyer; may go below zero */
    Journal j[NID];
    byte rmark[NE];         /* orders_reapply.lua's marker '<order>@<entry>' -> epoch */
    bit stream[NE];        /* the entry is in the order stream (not yet XDEL'd) */
    byte idem[NU + 1];     /* the buyer's idempotency key: 0, an entry, or REFUSED */
    byte wlock;            /* seckill:{sku}:lock:writer: the holder's token, 0 free */
    byte slock;            /* seckill:{sku}:lock:sku */
    byte fence;            /* the SKU's fencing counter (both locks draw from it) */
    Debt debt[ND];
    bit released[NID];     /* order_release.lua's marker per order */
    bit adj_open;          /* stock_adjust.lua's record of the admin delta */
    short adj;
}

#define REFUSED 7          /* idem: a refusal remembered under the key */

Redis R;                   /* the master buyers and writers talk to */
#if FAILOVER
Redis Rrep;                /* its replica: some prefix of the master's writes */
#endif
byte redis_run = 1;        /* the Redis run id (a failover makes a new one) */
bit failed_over;

/* ---- PostgreSQL --------------------------------------------------------------- */

#define S_NONE        0
#define S_CONFIRMED   1
#define S_REJECTED    2    /* refused by the writer: no stock or over the limit */
#define S_CANCELLED_P 3    /* cancelled before any writer wrote it: never took stock */
#define S_CANCELLED   4    /* confirmed, then cancelled: units returned */
#define S_EXPIRED     5    /* confirmed, then its payment window ended */

typedef Row {
    unsigned st      : 3;
    unsigned user    : 2;
    unsigned entry   : 3;  /* the reservation (the writer checks it on a replay) */
    unsigned reapply : 3;  /* orders.reapply_epoch */
    unsigned retep   : 3;  /* orders.return_epoch */
    bit unsettled;         /* return_settled = false */
}

typedef CancelReq {        /* order_cancel_requests */
    unsigned id    : 5;
    unsigned user  : 2;
    unsigned entry : 3;
    bit used;
}

/* order_pending: a durable order answered 202, recorded before the answer
 * (order_pending_record.sql); settled once by the settler (pending_settle.c).
 * The reservation time the code compares is the entry's (<ms>-<seq>): the
 * model compares the entry itself. */
#define REC_FREE     0     /* no record in this slot */
#define REC_OPEN     1     /* settled_at IS NULL */
#define REC_WRITTEN  2     /* outcome 'written': the order's row is its outcome */
#define REC_CONFLICT 3     /* outcome 'id_conflict': the lookup says rejected id_conflict */

typedef Rec {
    unsigned out   : 2;
    unsigned id    : 5;
    unsigned user  : 2;
    unsigned entry : 3;    /* with the buyer's idempotency key (every buyer has one) */
}

Row row[NID];
CancelReq creq[NCR];
#if PENDING_RECORD
Rec rec[NREC];
#endif
short pstock = STOCK0;     /* skus.stock */
byte pfence;               /* skus.fence_token */
byte epseq = 1;            /* the epoch sequence (1 drawn by the SKU's creation) */
byte pmaxep = 1;           /* max(sku_epochs.epoch): the last committed load */
short admin_sum;           /* the ledger's admin deltas */
byte rowlock;              /* _pid + 1 of a transaction holding the SKU row across steps */

/* ---- what the buyers were told, and other ghosts -------------------------------- */

#define A_NONE    0
#define A_201     1        /* confirmed */
#define A_202     2        /* pending */
#define A_409     3        /* rejected, with an order id */
#define A_REFUSED 4        /* sold out, over the limit, unavailable: no order */

typedef Answer { byte kind; byte id; byte entry }
Answer ans[2 * (NU + 1)];  /* buyer u's first answer at 2u, its retry's at 2u + 1 */
byte cancelled_e[NU + 1];  /* the reservation whose cancel request a buyer was told OK */

byte ent_id[NE];           /* stream entry -> its fields (order id, user) */
byte ent_user[NE];
byte next_entry = 1;
byte published[NE];        /* the decision PUBLISHed for an entry: 0, A_201, A_409 */
byte buyers_left = NBUYERS;
bit load_refused;          /* a rebuild's load was refused (the reconciler's job) */
byte max_loaded = 1;       /* the newest load the current Redis lineage installed */
#define ADM_NONE 0
#define ADM_TX   1
#define ADM_COMMITTED 2
#define ADM_ROLLED 3
byte adm_state;

/* ---- the switches ------------------------------------------------------------ */

/* Whether the journal state of order id names this reservation (buyer u,
 * entry e).  BUG2: the scripts key the journal by order id alone. */
#ifdef BUG2
#define NAMES(id, u, e) true
#else
#define NAMES(id, u, e) (R.j[id].user == (u) && R.j[id].entry == (e))
#endif

/* A cancel request for this reservation (orders_cancel_requested.sql: the
 * writer matches buyer and entry).  BUG5: order id and buyer only. */
#ifdef BUG5
#define CREQ_MATCH(i, id, u, e) (creq[i].used && creq[i].id == (id) && creq[i].user == (u))
#else
#define CREQ_MATCH(i, id, u, e) (creq[i].used && creq[i].id == (id) && creq[i].user == (u) && \
                                 creq[i].entry == (e))
#endif

/* A completion hook's Redis write with token tok under lock lk: refused when
 * the lock is another holder's and the fencing counter went past tok. */
#define FENCE_OK(lk, tok) ((lk) == (tok) || R.fence <= (tok))

/* A buyer's units held going down: kept below zero (BUG4: dropped at <= 0). */
#ifdef BUG4
#define BOUGHT_DOWN(u) R.bought[u]--; if :: R.bought[u] < 0 -> R.bought[u] = 0 :: else fi
#else
#define BOUGHT_DOWN(u) R.bought[u]--
#endif

#define TOUCH skip

/* ---- invariants of PostgreSQL ------------------------------------------------ */

/* I1 (no oversell) and I3 (per-user limit), after every commit. */
inline check_pg(i_, n_, n1_, n2_)
{
    n_ = 0; n1_ = 0; n2_ = 0;
    for (i_ : 0 .. NID - 1) {
        if
        :: row[i_].st == S_CONFIRMED ->
            n_++;
            if
            :: row[i_].user == 1 -> n1_++
            :: else -> n2_++
            fi
        :: else
        fi
    }
    assert(pstock >= 0);                         /* I1 */
    assert(pstock + n_ == STOCK0 + admin_sum);    /* I1: stock and active orders */
    assert(n1_ <= LIMIT && n2_ <= LIMIT);          /* I3 */
    i_ = 0; n_ = 0; n1_ = 0; n2_ = 0
}

/* Units user u holds in active orders (orders_user_units.sql, sku_bought.sql). */
inline active_units(u_, i_, n_)
{
    n_ = 0;
    for (i_ : 0 .. NID - 1) {
        if
        :: row[i_].st == S_CONFIRMED && row[i_].user == u_ -> n_++
        :: else
        fi
    }
    i_ = 0
}

/* ---- locks (rlock, txlock.c) ------------------------------------------------- */

/* SET NX with a fresh fencing token (rlock_acquire_fenced): ok = 0 when busy. */
inline lock_try(lk_, tok_, ok_)
{
    atomic {
        if
        :: lk_ == 0 -> R.fence++; tok_ = R.fence; lk_ = tok_; ok_ = 1; TOUCH;
           printf("[%d] takes a lock, token %d\n", _pid, tok_)
        :: else -> ok_ = 0; printf("[%d] lock busy\n", _pid)
        fi
    }
}

/* Compare-and-delete release: only the holder's own token frees the lock. */
inline lock_release(lk_, tok_)
{
    atomic {
        if
        :: lk_ == tok_ && tok_ != 0 -> lk_ = 0; TOUCH; printf("[%d] releases its lock\n", _pid)
        :: else
        fi;
        tok_ = 0
    }
}

/* The fenced row lock (sku_fence.sql / skus_fence_many.sql), inside a
 * transaction: refused when PostgreSQL saw a newer token; then a holder that
 * still holds its lock draws a newer one (rlock_fence_renew) and tries again,
 * one that lost it is stale (txlock_fence).  Redis's counter may be behind
 * PostgreSQL's after a failover: the renewal puts it past what PostgreSQL saw. */
inline pg_fence(lk_, tok_, ok_)
{
    if
    :: pfence <= tok_ -> pfence = tok_; ok_ = 1
    :: else ->
        if
        :: lk_ == tok_ ->
            if
            :: R.fence < pfence -> R.fence = pfence
            :: else
            fi;
            R.fence++; tok_ = R.fence; lk_ = tok_; pfence = tok_; ok_ = 1; TOUCH;
            printf("[%d] PostgreSQL refused its token; renewed to %d\n", _pid, tok_)
        :: else -> ok_ = 0; printf("[%d] PostgreSQL refused its token: stale, rolled back\n", _pid)
        fi
    fi
}

/* ---- the writer's Redis scripts (writer_settle.c) ---------------------------- */

/* order_return.lua: a rejected order's units back, once, if this reservation's
 * journal state is still pending and this Redis state counted it. */
inline order_return(id_, u_, e_)
{
    if
    :: R.j[id_].kind == J_PENDING && NAMES(id_, u_, e_) ->
        if
        :: EPOCH(id_) >= R.loaded -> R.stock++; BOUGHT_DOWN(u_)
        :: else
        fi;
        R.j[id_].kind = J_RETURNED
    :: else
    fi
}

inline add_debt(dep_, did_, du_, dgive_, i_)
{
    /* HSET of "<epoch>:<order>[:return]": the same key again overwrites */
    i_ = 0;
    do
    :: i_ < ND && R.debt[i_].used && R.debt[i_].ep == dep_ && R.debt[i_].id == did_ &&
       R.debt[i_].give == dgive_ -> break
    :: i_ < ND && !(R.debt[i_].used && R.debt[i_].ep == dep_ && R.debt[i_].id == did_ &&
                   R.debt[i_].give == dgive_) -> i_++
    :: i_ == ND ->
        i_ = 0;
        do
        :: i_ < ND && R.debt[i_].used -> i_++
        :: else -> break
        od;
        assert(i_ < ND);       /* a bound of the model, not of the protocol */
        break
    od;
    R.debt[i_].used = 1; R.debt[i_].ep = dep_; R.debt[i_].id = did_; R.debt[i_].user = du_;
    R.debt[i_].give = dgive_;
    i_ = 0
}

/* orders_reapply.lua: a confirmed order reserved before the SKU's last rebuild
 * is taken from that rebuild's state, once (marker per reservation). */
inline orders_reapply(id_, u_, e_, ep_, i_)
{
#ifdef BUG2
    if
    :: !(R.j[id_].kind == J_REAPPLIED && R.j[id_].ep == ep_) ->
#else
    if
    :: R.rmark[e_] != ep_ ->
#endif
        if
        :: R.loaded == ep_ -> R.stock--; R.bought[u_]++
        :: R.loaded < ep_ -> add_debt(ep_, id_, u_, 0, i_)
        :: else
        fi;
#ifdef BUG2
        R.j[id_].kind = J_REAPPLIED; R.j[id_].ep = ep_; R.j[id_].user = u_; R.j[id_].entry = e_
#else
        R.rmark[e_] = ep_
#endif
    :: else
    fi
}

/* orders_dead_letter.lua: an entry no writer can write (its order id is held
 * by another order: Redis issued it twice) leaves the stream, its units back
 * if this Redis state counted it, and its journal state says returned. */
inline dead_letter(id_, u_, e_)
{
    if
    :: R.stream[e_] ->
        if
        :: EPOCH(id_) >= R.loaded ->
            R.stock++; BOUGHT_DOWN(u_);
#ifdef BUG1
            /* BUG1: the journal is marked only when units are given back */
            if
            :: R.j[id_].kind == J_PENDING && NAMES(id_, u_, e_) -> R.j[id_].kind = J_RETURNED
            :: else
            fi
#endif
        :: else
        fi;
#ifndef BUG1
        if
        :: R.j[id_].kind == J_PENDING && NAMES(id_, u_, e_) -> R.j[id_].kind = J_RETURNED
        :: else
        fi;
#endif
        R.stream[e_] = 0
    :: else
    fi
}

/* orders_ack.lua: XACK/XDEL, and a confirmed order's pending state goes (the
 * database is its record now), only if it is this reservation's.  (BUG2, the
 * old script: by order id, and a reapplied order's state, which was its
 * marker, stayed.) */
inline orders_ack(id_, u_, e_, dec_, reap_)
{
#ifndef GAP_ACK
    /* A rejected order whose state is still this reservation's pending one
     * (order_return.lua's write was lost: a failover between the two round
     * trips) is returned here, in the same script as its XDEL.  GAP_ACK: not
     * (main at cc7e017): the entry goes and its state stays pending forever. */
    if
    :: dec_ == A_409 -> order_return(id_, u_, e_)
    :: else
    fi;
#endif
    R.stream[e_] = 0;
    if
#ifdef BUG2
    :: dec_ == A_201 && reap_ == 0 && R.j[id_].kind != J_NONE ->
#else
    :: dec_ == A_201 && R.j[id_].kind == J_PENDING && NAMES(id_, u_, e_) ->
#endif
        R.j[id_].kind = J_NONE; R.j[id_].user = 0; R.j[id_].entry = 0; R.j[id_].ep = 0
    :: else
    fi
}

/* ---- the order writer (order_writer.c, writer_tx.c, writer_settle.c) ---------- */

#define D_DEAD 5

/* XREADGROUP (or XAUTOCLAIM of an entry a paused writer holds): the entry's
 * fields as the stream has them. */
inline read_entry(e_, id_, u_)
{
    id_ = ent_id[e_]; u_ = ent_user[e_];
    printf("[%d] writer reads entry %d (order %d, buyer %d)\n", _pid, e_, id_, u_)
}

/* The lock release and the end of a batch (locals back to 0). */
inline batch_end(e_, id_, u_, tok_, ok_, dec_, reap_, hook_)
{
    if
    :: R.wlock == tok_ && tok_ != 0 -> R.wlock = 0; printf("[%d] releases its lock\n", _pid)
    :: else
    fi;
    e_ = 0; id_ = 0; u_ = 0; tok_ = 0; ok_ = 0; dec_ = 0; reap_ = 0; hook_ = 0
}

/*
 * One batch of one entry, already read (read_entry): take the writer lock,
 * one transaction (fenced row lock, reads, decision, guarded writes, COMMIT),
 * then the completion hook while the lock is held: first order_return.lua
 * (rejected) or orders_reapply.lua (confirmed across a rebuild), then
 * orders_dead_letter.lua (an id Redis issued twice) or orders_ack.lua with
 * the decisions' PUBLISH, each fenced, and last the release.  A refused
 * script ends the hook: the entry stays pending and is replayed.
 */
inline write_entry(e_, id_, u_, tok_, ok_, dec_, reap_, i_, n_, n1_, n2_, hook_)
{
    lock_try(R.wlock, tok_, ok_);
    if
    :: ok_ ->
        atomic {
            rowlock == 0 ->
            pg_fence(R.wlock, tok_, ok_);
            if
            :: ok_ ->
                if
                :: row[id_].st != S_NONE ->
                    /* a replay, or an id Redis issued twice (load_existing_row) */
                    if
                    :: row[id_].user != u_ || row[id_].entry != e_ -> dec_ = D_DEAD
                    :: row[id_].st == S_REJECTED || row[id_].st == S_CANCELLED_P -> dec_ = A_409
                    :: else -> dec_ = A_201
                    fi;
                    reap_ = row[id_].reapply
                :: else ->
                    /* decide_new: a cancel request of this reservation, the
                     * stock, the per-user limit; the database decides */
                    i_ = 0;
                    do
                    :: i_ < NCR && CREQ_MATCH(i_, id_, u_, e_) -> break
                    :: i_ < NCR && !CREQ_MATCH(i_, id_, u_, e_) -> i_++
                    :: i_ == NCR -> break
                    od;
                    active_units(u_, n_, n1_);
                    if
                    :: i_ < NCR -> dec_ = A_409; row[id_].st = S_CANCELLED_P;
                        /* the buyer asked to cancel this very reservation */
                        assert(cancelled_e[u_] == e_)
                    :: i_ == NCR && pstock < 1 -> dec_ = A_409; row[id_].st = S_REJECTED
                    :: i_ == NCR && pstock >= 1 && n1_ + 1 > LIMIT ->
                        dec_ = A_409; row[id_].st = S_REJECTED
                    :: else ->
                        dec_ = A_201; row[id_].st = S_CONFIRMED; pstock--;
                        if
                        :: EPOCH(id_) < pmaxep -> reap_ = pmaxep
                        :: else -> reap_ = 0
                        fi
                    fi;
                    row[id_].user = u_; row[id_].entry = e_; row[id_].reapply = reap_;
                    i_ = 0; n_ = 0; n1_ = 0
                fi;
                check_pg(i_, n_, n1_, n2_);
                printf("[%d] writer COMMIT: order %d entry %d -> %d (row %d, reapply %d, stock %d)\n",
                       _pid, id_, e_, dec_, row[id_].st, reap_, pstock)
            :: else -> skip /* stale: rolled back, the entry stays pending */
            fi;
            hook_ = ok_
        }
        /* the completion hook, under the lock (writer_settle_all) */
        if
        :: hook_ && (dec_ == A_409 || (dec_ == A_201 && reap_ != 0)) ->
            atomic {
                if
                :: !FENCE_OK(R.wlock, tok_) -> hook_ = 0; printf("[%d] settle script fenced off\n", _pid)
                :: FENCE_OK(R.wlock, tok_) && dec_ == A_409 ->
                    order_return(id_, u_, e_);
                    printf("[%d] order_return order %d entry %d: journal %d, stock %d\n",
                           _pid, id_, e_, R.j[id_].kind, R.stock)
                :: FENCE_OK(R.wlock, tok_) && dec_ == A_201 ->
                    orders_reapply(id_, u_, e_, reap_, i_);
                    printf("[%d] orders_reapply order %d epoch %d: Redis loaded %d, stock %d\n",
                           _pid, id_, reap_, R.loaded, R.stock)
                fi
            }
        :: else
        fi;
        atomic {
            if
            :: hook_ && dec_ == D_DEAD && FENCE_OK(R.wlock, tok_) ->
                dead_letter(id_, u_, e_);
                printf("[%d] orders_dead_letter entry %d (order %d): Redis loaded %d, journal[%d] = %d\n",
                       _pid, e_, id_, R.loaded, id_, R.j[id_].kind)
            :: hook_ && dec_ != D_DEAD ->
                /* the acknowledgements and the decisions, one pipeline */
                if
                :: FENCE_OK(R.wlock, tok_) -> orders_ack(id_, u_, e_, dec_, reap_);
                    printf("[%d] orders_ack entry %d: journal[%d] = %d\n", _pid, e_, id_, R.j[id_].kind)
                :: else -> printf("[%d] orders_ack fenced off\n", _pid)
                fi;
                published[e_] = dec_;
                printf("[%d] publishes decision %d for order %d entry %d\n", _pid, dec_, id_, e_)
            :: else -> printf("[%d] hook ends early\n", _pid)
            fi;
            batch_end(e_, id_, u_, tok_, ok_, dec_, reap_, hook_)
        }
    :: else -> atomic { batch_end(e_, id_, u_, tok_, ok_, dec_, reap_, hook_) }
    fi
}

/* An entry in the stream, any (a reclaim hands a paused writer's to another). */
inline pick_entry(e_)
{
    if
    :: R.stream[1] -> e_ = 1
    :: R.stream[2] -> e_ = 2
    :: R.stream[3] -> e_ = 3
    :: R.stream[4] -> e_ = 4
    :: R.stream[5] -> e_ = 5
    fi
}

#define STREAM_EMPTY (!R.stream[1] && !R.stream[2] && !R.stream[3] && !R.stream[4] && \
                      !R.stream[5])

proctype Writer()
{
    byte e, id, u, tok, dec, reap, i, n, n1, n2, nb;
    bit ok, hook;
    do
    :: nb < WBATCHES ->
        if
        :: atomic { pick_entry(e); read_entry(e, id, u); nb++ }
        :: atomic { buyers_left == 0 && STREAM_EMPTY -> break }
        fi;
        write_entry(e, id, u, tok, ok, dec, reap, i, n, n1, n2, hook)
    :: else -> break
    od
}

/* ---- buyers (reserve.lua, order_desk.c, order_wait.c) ------------------------ */

/* reserve.lua for buyer u with its idempotency key: a new reservation, or the
 * answer the key remembers.  res: A_202 with (id, e) for an order taken or
 * replayed pending, A_201 / A_409 for a replayed decision, A_REFUSED. */
inline reserve(u_, id_, e_, res_)
{
    atomic {
        if
        :: R.loaded == 0 -> res_ = A_REFUSED                  /* not loaded: 503 */
        :: R.loaded != 0 && R.idem[u_] == REFUSED -> res_ = A_REFUSED
        :: R.loaded != 0 && R.idem[u_] != 0 && R.idem[u_] != REFUSED ->
            /* 'dup': the order as the journal says it is now */
            e_ = R.idem[u_]; id_ = ent_id[e_];
            if
            :: R.j[id_].kind == J_PENDING -> res_ = A_202
            :: R.j[id_].kind == J_RETURNED -> res_ = A_409
            :: else -> res_ = A_201            /* no state (or a marker): confirmed */
            fi;
            printf("[%d] buyer %d retries its key: order %d entry %d, journal %d\n", _pid, u_, id_, e_, R.j[id_].kind)
        :: R.loaded != 0 && R.idem[u_] == 0 ->
            if
            :: R.bought[u_] > 0 && R.bought[u_] + 1 > LIMIT -> res_ = A_REFUSED; R.idem[u_] = REFUSED
            :: (R.bought[u_] <= 0 || R.bought[u_] + 1 <= LIMIT) && R.stock < 1 ->
                res_ = A_REFUSED; R.idem[u_] = REFUSED
            :: (R.bought[u_] <= 0 || R.bought[u_] + 1 <= LIMIT) && R.stock >= 1 &&
               R.seq + 1 >= K -> res_ = A_REFUSED                  /* exhausted */
            :: (R.bought[u_] <= 0 || R.bought[u_] + 1 <= LIMIT) && R.stock >= 1 &&
               R.seq + 1 < K ->
                R.seq++; id_ = R.loaded * K + R.seq; R.stock--; R.bought[u_]++;
                e_ = next_entry; next_entry++; assert(e_ < NE);
                ent_id[e_] = id_; ent_user[e_] = u_;
                R.stream[e_] = 1;
                R.j[id_].kind = J_PENDING; R.j[id_].user = u_; R.j[id_].entry = e_; R.j[id_].ep = 0;
                R.idem[u_] = e_;
                res_ = A_202;
                printf("[%d] buyer %d reserves: order %d, entry %d (Redis stock %d)\n", _pid, u_, id_, e_, R.stock)
            fi;
            TOUCH
        fi
    }
}

#if PENDING_RECORD
/* order_pending_record.sql: INSERT ... ON CONFLICT (order id, entry) DO
 * NOTHING.  Writes nothing to Redis. */
inline record_pending(u_, id_, e_, i_)
{
    i_ = 0;
    do
    :: i_ < NREC && rec[i_].out != REC_FREE && !(rec[i_].id == id_ && rec[i_].entry == e_) -> i_++
    :: else -> break
    od;
    assert(i_ < NREC);         /* a bound of the model */
    if
    :: rec[i_].out == REC_FREE ->
        rec[i_].out = REC_OPEN; rec[i_].id = id_; rec[i_].user = u_; rec[i_].entry = e_;
        printf("[%d] order_pending records order %d entry %d (buyer %d)\n", _pid, id_, e_, u_)
    :: else
    fi;
    i_ = 0
}
#endif

/* Records answer slot k and checks what can be checked at once: a 201 names
 * an order the buyer owns that PostgreSQL holds confirmed (or held: it may be
 * cancelled or expired since); a 409 names no order that took stock.  A 202
 * is answered only once PostgreSQL holds its record (record_done; the record
 * and the answer are one step: the answer itself changes nothing another
 * process can see).  A record that fails is answered 503 with the key, which
 * promises nothing: not modelled (a buyer that is not answered). */
inline answer(u_, k_, res_, id_, e_, i_)
{
    atomic {
#if PENDING_RECORD
        if
        :: res_ == A_202 -> record_pending(u_, id_, e_, i_)
        :: else
        fi;
#endif
        ans[2 * u_ + k_].kind = res_; ans[2 * u_ + k_].id = id_; ans[2 * u_ + k_].entry = e_;
        printf("[%d] buyer %d is answered %d (1: 201, 2: 202, 3: 409, 4: refused) for order %d entry %d\n", _pid, u_, res_, id_, e_);
        if
        :: res_ == A_201 ->
            assert(row[id_].user == u_ && row[id_].entry == e_ &&
                   (row[id_].st == S_CONFIRMED || row[id_].st == S_CANCELLED ||
                    row[id_].st == S_EXPIRED))
        :: res_ == A_409 ->
            assert(!(row[id_].entry == e_ &&
                     (row[id_].st == S_CONFIRMED || row[id_].st == S_CANCELLED ||
                      row[id_].st == S_EXPIRED)))
        :: else
        fi
    }
}

/* Durable mode: wait for the writer's decision of this reservation (order
 * id and entry), or answer 202 pending when order_ack_wait_ms passes. */
inline wait_decision(res_, e_)
{
    if
    :: res_ == A_202 ->
        if
        :: published[e_] != 0 -> res_ = published[e_]
        :: true                                    /* timed out: 202 */
        fi
    :: else
    fi
}

#if CANCEL || SWEEPER
/* ---- cancel and expiry (order_life.c) ----------------------------------------- */

/* order_release.lua over every unsettled return (bitmask 'rel'): units back to
 * the load that did not read the return, once per order, fenced. */
inline order_release(rel_, tok_, i_, k_)
{
    atomic {
        if
        :: FENCE_OK(R.slock, tok_) ->
            for (k_ : 0 .. NID - 1) {
                if
                :: (rel_ >> k_) & 1 && !R.released[k_] ->
                    R.released[k_] = 1;
                    if
                    :: R.loaded == row[k_].retep -> R.stock++; BOUGHT_DOWN(row[k_].user)
                    :: R.loaded < row[k_].retep -> add_debt(row[k_].retep, k_, row[k_].user, 1, i_)
                    :: else
                    fi
                :: else
                fi
            };
            TOUCH
        :: else -> rel_ = 0       /* refused: the rows stay unsettled, a later pass settles */
        fi;
        k_ = 0
    }
}

/* The unsettled returns (orders_return_unsettled.sql) as a bitmask. */
inline read_unsettled(rel_, k_)
{
    rel_ = 0;
    for (k_ : 0 .. NID - 1) {
        if
        :: row[k_].unsettled -> rel_ = rel_ | (1 << k_)
        :: else
        fi
    };
    k_ = 0
}

/* After the commit, outside the lock: the rows whose units Redis has. */
inline mark_settled(rel_, k_)
{
    atomic {
        for (k_ : 0 .. NID - 1) {
            if
            :: (rel_ >> k_) & 1 -> row[k_].unsettled = 0
            :: else
            fi
        };
        k_ = 0; rel_ = 0
    }
}

/* Returns an order to stock in PostgreSQL (orders_cancel.sql, orders_expire.sql). */
inline pg_return(id_, st_)
{
    row[id_].st = st_; pstock++; row[id_].retep = pmaxep; row[id_].unsettled = 1
}

/*
 * locked() with cancel_step: buyer u cancels order id.  A confirmed row goes
 * back to stock; no row and a journal that says this buyer's reservation is
 * pending records a cancel request naming it (the writer reads it under the
 * same row lock).  Then every unsettled return is given to Redis.
 */
inline cancel(u_, id_, tok_, ok_, rel_, i_, k_, n_, n1_, n2_)
{
    lock_try(R.slock, tok_, ok_);
    if
    :: ok_ ->
        /* one transaction (the journal is read inside it, under the row lock:
         * no writer can commit this order meanwhile) */
        atomic {
            rowlock == 0 ->
            pg_fence(R.slock, tok_, ok_);
            if
            :: ok_ && row[id_].st == S_CONFIRMED && row[id_].user == u_ ->
                pg_return(id_, S_CANCELLED); check_pg(i_, n_, n1_, n2_);
                printf("[%d] buyer %d cancels confirmed order %d\n", _pid, u_, id_)
            :: ok_ && row[id_].st == S_NONE ->
                /* order_pending_owner_of: the journal names buyer and entry */
                n_ = 0;
                if
                :: R.j[id_].kind == J_PENDING && R.j[id_].user == u_ -> n_ = R.j[id_].entry
#if PENDING_RECORD
                :: else ->
                    /* not in the journal: the buyer's newest record of this id
                     * (order_pending_of), whose reservation Redis lost; the
                     * settler reads the request under this same lock.  One
                     * settled id_conflict is rejected: no request. */
                    i_ = NREC;
                    do
                    :: i_ > 0 && !(rec[i_ - 1].out != REC_FREE && rec[i_ - 1].id == id_ &&
                                   rec[i_ - 1].user == u_) -> i_--
                    :: else -> break
                    od;
                    if
                    :: i_ > 0 && rec[i_ - 1].out != REC_CONFLICT -> n_ = rec[i_ - 1].entry
                    :: else
                    fi
#else
                :: else
#endif
                fi;
                if
                :: n_ != 0 ->
                    i_ = 0;
                    do
                    :: creq[i_].used && !(creq[i_].id == id_ && creq[i_].entry == n_) -> i_++
                    :: else -> break
                    od;
                    assert(i_ < NCR);
                    creq[i_].used = 1; creq[i_].id = id_; creq[i_].user = u_; creq[i_].entry = n_;
                    cancelled_e[u_] = n_;
                    printf("[%d] buyer %d cancels pending order %d (entry %d): a request\n", _pid,
                           u_, id_, n_)
                :: else
                fi;
                n_ = 0; i_ = 0
            :: else
            fi;
            if
            :: ok_ -> read_unsettled(rel_, k_)   /* and every return not yet given to Redis */
            :: else
            fi
        }
        /* the completion hook, then the lock's release */
        atomic {
            if
            :: rel_ != 0 -> order_release(rel_, tok_, i_, k_)
            :: else
            fi;
            lock_release(R.slock, tok_)
        }
        /* after the commit, the lock free again: the rows are settled */
        if
        :: rel_ != 0 -> mark_settled(rel_, k_)
        :: else
        fi
    :: else
    fi;
    ok_ = 0
}
#endif

proctype Buyer(byte u)
{
    byte id, e, res, tok, i, k, n, n1, n2;
    int rel;
    bit ok, held;
    reserve(u, id, e, res);
    wait_decision(res, e);
    answer(u, 0, res, id, e, i);
#if CANCEL
    if
    :: u == 1 && (res == A_201 || res == A_202) ->    /* buyer 1 may cancel its order */
        cancel(u, id, tok, ok, rel, i, k, n, n1, n2)
    :: true
    fi;
#endif
#if RETRY
    if
    :: true ->
        /* the same request again, same key (a lost reply, an impatient buyer) */
        atomic { res = 0; id = 0; e = 0 }
        reserve(u, id, e, res);
        wait_decision(res, e);
        answer(u, 1, res, id, e, i)
    :: true
    fi;
#endif
    atomic { buyers_left-- ; id = 0; e = 0; res = 0 }
}

#if PENDING_RECORD
/* The write-back of record r_ (read by a rebuild's transaction: not settled,
 * no row under its id): the buyer's key (naming order@entry) and
 * 'pending:<user>:<entry>' written back, unless the key is there (held, or
 * another order's), the entry is in the stream (held), or the journal holds
 * a state of the id other than this reservation's own pending one.  It runs
 * inside sku_load.lua (rebuild mode), after the new epoch is installed, in
 * the same atomic script (sku_load below); RESTORE_BEFORE_LOAD: the earlier
 * design, order_pending_restore.lua from the rebuild's transaction, before
 * its COMMIT and before the load. */
inline pending_restore(r_, id_, u_, e_)
{
    id_ = rec[r_].id; u_ = rec[r_].user; e_ = rec[r_].entry;
    if
    :: R.idem[u_] == 0 && !R.stream[e_] &&
       (R.j[id_].kind == J_NONE || (R.j[id_].kind == J_PENDING && NAMES(id_, u_, e_))) ->
        R.idem[u_] = e_;
        R.j[id_].kind = J_PENDING; R.j[id_].user = u_; R.j[id_].entry = e_; R.j[id_].ep = 0;
        printf("[%d] restore: order %d entry %d, buyer %d's key and pending state back\n",
               _pid, id_, e_, u_)
    :: else
    fi;
    id_ = 0; u_ = 0; e_ = 0
}

#endif

/* ---- rebuilds (sku.c check_once / prepare_rebuild, sku_store.c, sku_load.lua) --- */

/* settle_adjustments: a record whose transaction ended is dropped (committed)
 * or undone (rolled back); under the SKU lock and row. */
inline settle_adjustments()
{
    if
    :: R.adj_open && adm_state == ADM_COMMITTED -> R.adj_open = 0; R.adj = 0; TOUCH
    :: R.adj_open && adm_state == ADM_ROLLED -> R.stock = R.stock - R.adj; R.adj_open = 0;
        R.adj = 0; TOUCH
    :: else
    fi
}

/* sku_load.lua in rebuild mode, from the completion hook (load_on_commit):
 * fenced, never an epoch not newer than the loaded one; once the new epoch
 * and its meta are installed, in the same script, the write-back of the
 * recorded 202s the rebuild's transaction read (the mask rm_ of records).
 * A refused load writes nothing back.  No id of the old epoch can be issued
 * after a key is written back (reserve.lua issues ids of the loaded epoch),
 * and a replica promoted later holds both the epoch and the keys, or neither. */
inline sku_load(ep_, snap_, b1_, b2_, runid_, tok_, i_, rm_, t1_, t2_, t3_)
{
    atomic {
        if
#if defined(BUG3)
        :: true ->          /* BUG3: a rebuild installs any epoch, unfenced */
#elif defined(GAP_LOAD)
        :: ep_ > R.loaded -> /* GAP_LOAD: the epoch guard alone (main at cc7e017) */
#else
        /* never an epoch older than (or as old as) the loaded one, and fenced
         * like every completion hook's write */
        :: ep_ > R.loaded && FENCE_OK(R.slock, tok_) ->
#endif
            printf("[%d] sku_load installs epoch %d over epoch %d\n", _pid, ep_, R.loaded);
            R.stock = snap_; R.seq = 0; R.bought[1] = b1_; R.bought[2] = b2_;
            for (i_ : 0 .. ND - 1) {
                if
                :: R.debt[i_].used && R.debt[i_].ep == ep_ ->
                    if
                    :: R.debt[i_].give -> R.stock++; BOUGHT_DOWN(R.debt[i_].user)
                    :: else -> R.stock--; R.bought[R.debt[i_].user]++
                    fi
                :: else
                fi;
                if
                :: R.debt[i_].used && R.debt[i_].ep <= ep_ ->
                    R.debt[i_].used = 0; R.debt[i_].ep = 0; R.debt[i_].id = 0;
                    R.debt[i_].user = 0; R.debt[i_].give = 0
                :: else
                fi
            };
            R.loaded = ep_; R.built_run = runid_;
            /* the epochs Redis holds only go forward (within one Redis lineage) */
            assert(ep_ >= max_loaded);
            max_loaded = ep_;
            TOUCH;
            printf("[%d] sku_load: Redis stock %d, units %d/%d\n", _pid, R.stock, R.bought[1],
                   R.bought[2]);
#if PENDING_RECORD && !defined(RESTORE_BEFORE_LOAD) && FAILOVER
            for (i_ : 0 .. NREC - 1) {
                if
                :: (rm_ >> i_) & 1 -> pending_restore(i_, t1_, t2_, t3_)
                :: else
                fi
            };
#elif PENDING_RECORD && !defined(RESTORE_BEFORE_LOAD)
            /* without a failover every recorded buyer's key is still there:
             * the write-back would write nothing (rebuild() keeps no mask) */
            for (i_ : 0 .. NREC - 1) {
                assert(rec[i_].out == REC_FREE || R.idem[rec[i_].user] != 0)
            };
#endif
            skip
        :: else -> load_refused = 1; printf("[%d] sku_load of epoch %d refused\n", _pid, ep_)
        fi;
        i_ = 0; rm_ = 0
    }
}

/* A rebuild of the SKU from PostgreSQL: the SKU lock, one transaction (fenced
 * row, open adjustments settled, the stock and every buyer's units read, the
 * recorded 202s to write back read, a new epoch drawn), COMMIT, then
 * sku_load.lua in the completion hook, which writes them back. */
inline rebuild(tok_, ok_, ep_, snap_, b1_, b2_, runid_, i_, rm_, t1_, t2_, t3_)
{
    atomic {
        runid_ = redis_run;              /* INFO server's run_id, read first */
        lock_try(R.slock, tok_, ok_)
    }
    if
    :: ok_ ->
        atomic {
            rowlock == 0 ->
            pg_fence(R.slock, tok_, ok_);
            if
            :: ok_ ->
                settle_adjustments();
                snap_ = pstock;
                active_units(1, i_, b1_);
                active_units(2, i_, b2_);
                epseq++; assert(epseq < MAXEP); ep_ = epseq; pmaxep = ep_;
#if PENDING_RECORD
                /* pending_restore_keys: the records not settled whose id no
                 * row holds, read in this transaction; written back by the
                 * load (RESTORE_BEFORE_LOAD: here, before the COMMIT) */
                for (i_ : 0 .. NREC - 1) {
                    if
                    :: rec[i_].out == REC_OPEN && row[rec[i_].id].st == S_NONE ->
#if defined(RESTORE_BEFORE_LOAD)
                        pending_restore(i_, t1_, t2_, t3_)
#elif FAILOVER
                        rm_ = rm_ | (1 << i_)
#else
                        /* no failover: no key is ever lost (the model's keys
                         * do not expire), so the load's write-back finds
                         * every recorded buyer's key and writes nothing (it
                         * asserts so); the mask would only split states */
                        skip
#endif
                    :: else
                    fi
                };
                i_ = 0;
#endif
                printf("[%d] rebuild COMMIT: epoch %d, stock %d, units %d/%d\n", _pid, ep_, snap_,
                       b1_, b2_)
            :: else
            fi
        }
        /* load_on_commit, then the lock's release */
        atomic {
            if
            :: ok_ -> sku_load(ep_, snap_, b1_, b2_, runid_, tok_, i_, rm_, t1_, t2_, t3_)
            :: else
            fi;
            lock_release(R.slock, tok_);
            ok_ = 0; ep_ = 0; snap_ = 0; b1_ = 0; b2_ = 0; runid_ = 0; rm_ = 0
        }
    :: else -> atomic { ok_ = 0; runid_ = 0 }
    fi
}

proctype Rebuild()
{
    byte tok, ep, b1, b2, runid, i, rm, t1, t2, t3;
    short snap;
    bit ok;
    rebuild(tok, ok, ep, snap, b1, b2, runid, i, rm, t1, t2, t3)
}

#if PENDING_RECORD
/* ---- recorded 202s (pending_settle.c, order_pending_*.lua) ----------------------- */

/*
 * One settler pass (settle_once), its transaction: under the SKU lock and
 * the fenced row, every open record, in reservation order: a row of that
 * reservation -> 'written'; a row of another -> 'id_conflict'; no row and
 * the entry in the stream (order_pending_probe.lua) -> left to its writer;
 * else Redis lost it, and it is decided as a writer decides (decide()): the
 * buyer's cancel request of this entry, 'superseded' when the buyer's key
 * names another order, the per-user limit, the guarded stock take.  What
 * Redis must learn after COMMIT goes in masks of records: jm_ the journal
 * (order_pending_settled.lua), dm_ of those: dropped ('') rather than
 * 'returned:', rm_ confirmed here: orders_reapply.lua with the epoch rep_.
 * The probe is a Redis read inside the transaction: it is part of the step
 * (what the row lock keeps out is every writer's commit).
 */
inline settle_tx(tok_, ok_, r_, id_, u_, e_, jm_, dm_, rm_, rep_, i_, n_, n1_, n2_)
{
    atomic {
        rowlock == 0 ->
        pg_fence(R.slock, tok_, ok_);
        if
        :: ok_ ->
            rep_ = pmaxep;                            /* skus_write_rules: the last load */
            for (r_ : 0 .. NREC - 1) {
                id_ = rec[r_].id; u_ = rec[r_].user; e_ = rec[r_].entry;
                if
                :: rec[r_].out != REC_OPEN
                :: rec[r_].out == REC_OPEN && row[id_].st != S_NONE && row[id_].user == u_ &&
                   row[id_].entry == e_ ->
                    rec[r_].out = REC_WRITTEN; jm_ = jm_ | (1 << r_);
                    if
                    :: row[id_].st != S_REJECTED -> dm_ = dm_ | (1 << r_)
                    :: else
                    fi;
                    printf("[%d] settler: order %d entry %d has its row: written\n", _pid, id_, e_)
                :: rec[r_].out == REC_OPEN && row[id_].st != S_NONE &&
                   !(row[id_].user == u_ && row[id_].entry == e_) ->
                    rec[r_].out = REC_CONFLICT; jm_ = jm_ | (1 << r_);
                    printf("[%d] settler: order %d entry %d: another's row, id_conflict\n", _pid, id_, e_)
                :: rec[r_].out == REC_OPEN && row[id_].st == S_NONE && R.stream[e_] ->
                    printf("[%d] settler: order %d entry %d in flight\n", _pid, id_, e_)
                :: rec[r_].out == REC_OPEN && row[id_].st == S_NONE && !R.stream[e_] ->
                    i_ = 0;
                    do
                    :: i_ < NCR && CREQ_MATCH(i_, id_, u_, e_) -> break
                    :: i_ < NCR && !CREQ_MATCH(i_, id_, u_, e_) -> i_++
                    :: i_ == NCR -> break
                    od;
                    active_units(u_, n_, n1_);
                    if
                    :: i_ < NCR -> row[id_].st = S_CANCELLED_P;
                        assert(cancelled_e[u_] == e_)
                    :: i_ == NCR && R.idem[u_] != 0 && R.idem[u_] != e_ ->
                        row[id_].st = S_REJECTED                  /* superseded */
                    :: i_ == NCR && !(R.idem[u_] != 0 && R.idem[u_] != e_) && n1_ + 1 > LIMIT ->
                        row[id_].st = S_REJECTED                  /* limit_exceeded */
                    :: i_ == NCR && !(R.idem[u_] != 0 && R.idem[u_] != e_) && n1_ + 1 <= LIMIT &&
                       pstock < 1 ->
                        row[id_].st = S_REJECTED                  /* insufficient_stock */
                    :: else ->
                        row[id_].st = S_CONFIRMED; pstock--; row[id_].reapply = rep_;
                        rm_ = rm_ | (1 << r_); dm_ = dm_ | (1 << r_)
                    fi;
                    row[id_].user = u_; row[id_].entry = e_;
                    rec[r_].out = REC_WRITTEN; jm_ = jm_ | (1 << r_);
                    i_ = 0; n_ = 0; n1_ = 0;
                    printf("[%d] settler: order %d entry %d lost by Redis, decided: row %d\n", _pid,
                           id_, e_, row[id_].st)
                fi
            };
            check_pg(i_, n_, n1_, n2_);
            id_ = 0; u_ = 0; e_ = 0
        :: else
        fi
    }
}

/* settled_on_complete, under the lock: orders_reapply.lua (confirmed ones
 * taken from the load rep_, once by marker), then order_pending_settled.lua
 * (the journal state, only if it is still this reservation's pending one
 * and its entry is gone), each fenced, then the lock's release. */
inline settle_hook(tok_, r_, id_, u_, e_, jm_, dm_, rm_, rep_, i_)
{
    if
    :: rm_ != 0 ->
        atomic {
            if
            :: FENCE_OK(R.slock, tok_) ->
                for (r_ : 0 .. NREC - 1) {
                    if
                    :: (rm_ >> r_) & 1 -> orders_reapply(rec[r_].id, rec[r_].user, rec[r_].entry, rep_, i_)
                    :: else
                    fi
                };
                printf("[%d] settler: orders_reapply, Redis loaded %d, stock %d\n", _pid, R.loaded, R.stock)
            :: else -> printf("[%d] settler: orders_reapply fenced off\n", _pid)
            fi
        }
    :: else
    fi;
    atomic {
        if
        :: jm_ != 0 && FENCE_OK(R.slock, tok_) ->
            for (r_ : 0 .. NREC - 1) {
                id_ = rec[r_].id; u_ = rec[r_].user; e_ = rec[r_].entry;
                if
                :: (jm_ >> r_) & 1 && R.j[id_].kind == J_PENDING && NAMES(id_, u_, e_) && !R.stream[e_] ->
                    if
                    :: (dm_ >> r_) & 1 -> R.j[id_].kind = J_NONE; R.j[id_].user = 0; R.j[id_].entry = 0
                    :: else -> R.j[id_].kind = J_RETURNED
                    fi;
                    printf("[%d] order_pending_settled: journal[%d] = %d\n", _pid, id_, R.j[id_].kind)
                :: else
                fi
            };
            id_ = 0; u_ = 0; e_ = 0
        :: jm_ != 0 && !FENCE_OK(R.slock, tok_) -> printf("[%d] order_pending_settled fenced off\n", _pid)
        :: else
        fi;
        lock_release(R.slock, tok_);
        jm_ = 0; dm_ = 0; rm_ = 0; rep_ = 0; r_ = 0
    }
}

#if SETTLER
/* The reconciler's pass over recorded 202s (pending_settle_due), any time. */
proctype Settler()
{
    byte tok, r, id, u, e, jm, dm, rm, rep, i, n, n1, n2;
    bit ok;
    lock_try(R.slock, tok, ok);
    if
    :: ok ->
        settle_tx(tok, ok, r, id, u, e, jm, dm, rm, rep, i, n, n1, n2);
        settle_hook(tok, r, id, u, e, jm, dm, rm, rep, i)
    :: else
    fi
}
#endif
#endif

#if SWEEPER
/* The expiry sweeper (order_sweeper.c, locked() with expire_step): one
 * confirmed order's payment window ends. */
proctype Sweeper()
{
    byte tok, i, k, n, n1, n2, id;
    int rel;
    bit ok;
    lock_try(R.slock, tok, ok);
    if
    :: ok ->
        atomic {
            rowlock == 0 ->
            pg_fence(R.slock, tok, ok);
            if
            :: ok ->
                /* any confirmed order may be the one due */
                id = 0;
                do
                :: id < NID && row[id].st == S_CONFIRMED -> pg_return(id, S_EXPIRED);
                    printf("[%d] sweeper expires order %d\n", _pid, id); break
                :: id < NID -> id++
                :: id == NID -> break
                od;
                read_unsettled(rel, k); check_pg(i, n, n1, n2); id = 0
            :: else
            fi
        }
        atomic {
            if
            :: rel != 0 -> order_release(rel, tok, i, k)
            :: else
            fi;
            lock_release(R.slock, tok)
        }
        if
        :: rel != 0 -> mark_settled(rel, k)
        :: else
        fi
    :: else
    fi
}
#endif

#if ADMIN
/* An admin delta of +1 or -1 (sku_store.c adjust_once): the SKU lock, the
 * fenced row and the guarded UPDATE, then stock_adjust.lua (guarded against
 * what Redis still has, recorded under the transaction), COMMIT or ROLLBACK,
 * and the completion hook drops the record or undoes the delta. */
proctype Admin()
{
    byte tok, i, n, n1, n2;
    short d;
    bit ok, commit;
    if
    :: d = 1
    :: d = -1
    fi;
    lock_try(R.slock, tok, ok);
    if
    :: ok ->
        atomic {
            rowlock == 0 ->
            pg_fence(R.slock, tok, ok);
            if
            :: ok && pstock + d >= 0 -> settle_adjustments(); rowlock = _pid + 1; adm_state = ADM_TX
            :: else -> ok = 0                            /* 409, nothing changed */
            fi
        }
        if
        :: ok ->
            atomic {
                if
                :: R.loaded == 0 -> commit = 0                   /* not_loaded */
                :: R.loaded != 0 && d < 0 && R.stock + d < 0 -> commit = 0  /* insufficient */
                :: else -> R.adj_open = 1; R.adj = d; R.stock = R.stock + d; commit = 1; TOUCH;
                    printf("[%d] admin delta %d: stock_adjust.lua, Redis stock %d\n", _pid, d, R.stock)
                fi
            }
            atomic {
                if
                :: commit -> pstock = pstock + d; admin_sum = admin_sum + d;
                    adm_state = ADM_COMMITTED; check_pg(i, n, n1, n2);
                    printf("[%d] admin delta %d: COMMIT, stock %d\n", _pid, d, pstock)
                :: else -> adm_state = ADM_ROLLED; printf("[%d] admin delta %d: ROLLBACK\n", _pid, d)
                fi;
                rowlock = 0
            }
            /* adjust_on_complete: drop the record or undo the delta; then the
             * lock's release */
            atomic { settle_adjustments(); lock_release(R.slock, tok) }
        :: else -> lock_release(R.slock, tok)
        fi
    :: else
    fi
}
#endif

/* ---- the environment ------------------------------------------------------- */

/* A lock's lease runs out while its holder pauses (at most MAXEXPIRE times). */
proctype Leases()
{
    byte n;
    do
    :: atomic { n < MAXEXPIRE && R.wlock != 0 -> R.wlock = 0; n++; TOUCH; printf("the writer lock's lease ends\n") }
    :: atomic { n < MAXEXPIRE && R.slock != 0 -> R.slock = 0; n++; TOUCH; printf("the SKU lock's lease ends\n") }
    :: break
    od
}

#if FAILOVER
inline copy_redis(dst_, src_, i_)
{
    dst_.loaded = src_.loaded; dst_.built_run = src_.built_run; dst_.stock = src_.stock;
    dst_.seq = src_.seq; dst_.wlock = src_.wlock; dst_.slock = src_.slock; dst_.fence = src_.fence;
    dst_.adj_open = src_.adj_open; dst_.adj = src_.adj;
    for (i_ : 0 .. NU) {
        dst_.bought[i_] = src_.bought[i_]; dst_.idem[i_] = src_.idem[i_]
    };
    for (i_ : 0 .. NID - 1) {
        dst_.j[i_].kind = src_.j[i_].kind; dst_.j[i_].user = src_.j[i_].user;
        dst_.j[i_].entry = src_.j[i_].entry; dst_.j[i_].ep = src_.j[i_].ep;
        dst_.released[i_] = src_.released[i_]
    };
    for (i_ : 0 .. NE - 1) {
        dst_.stream[i_] = src_.stream[i_]; dst_.rmark[i_] = src_.rmark[i_]
    };
    for (i_ : 0 .. ND - 1) {
        dst_.debt[i_].used = src_.debt[i_].used; dst_.debt[i_].ep = src_.debt[i_].ep;
        dst_.debt[i_].id = src_.debt[i_].id; dst_.debt[i_].user = src_.debt[i_].user;
        dst_.debt[i_].give = src_.debt[i_].give
    };
    i_ = 0
}

/* Asynchronous replication and a failover.  The replica holds the master's
 * writes up to some moment (its last catch-up), and Sentinel promotes it: the
 * writes after that moment are gone, lock keys and fencing counter included,
 * and Redis has a new run id.  Only the last catch-up before the failover
 * matters, so one is enough: at any moment, or never (the replica has the
 * state of the SKU's creation). */
proctype Failover()
{
    byte i;
    if
    :: atomic { copy_redis(Rrep, R, i); printf("the replica catches up\n") }
    :: skip
    fi;
    if
    :: atomic {
           copy_redis(R, Rrep, i); redis_run++; failed_over = 1; max_loaded = R.loaded;
           printf("FAILOVER: the replica is the master (loaded %d, stock %d, seq %d)\n", R.loaded,
                  R.stock, R.seq)
       }
    :: skip
    fi
}
#endif

/* ---- the end: a quiet period, then what must hold ----------------------------- */

/* After every process above has finished (or stopped for good), leases run
 * out and one writer drains the stream alone, a sweeper pass settles returns,
 * the reconciler settles adjustment records: the service settling by itself
 * (I7).  Then: */
inline quiet_checks(u_, k_, id_, e_, i_, n_)
{
    /* every order reserved was decided: nothing stays pending (issue 24 #1) */
    assert(STREAM_EMPTY);
    for (i_ : 0 .. NID - 1) {
        assert(R.j[i_].kind != J_PENDING)
    };
    for (u_ : 1 .. NU) {
        for (k_ : 0 .. 1) {
            id_ = ans[2 * u_ + k_].id; e_ = ans[2 * u_ + k_].entry;
            if
            :: ans[2 * u_ + k_].kind == A_202 ->
                /* a pending answer is settled: the buyer's lookup no longer says pending */
                assert(!(!(row[id_].st != S_NONE && row[id_].user == u_) &&
                         R.j[id_].kind == J_PENDING && R.j[id_].user == u_));
#if PENDING_RECORD
                /* and it was not lost (issue 24, item 5): it ends as the row of
                 * that reservation (confirmed, rejected or cancelled), or as
                 * its record settled id_conflict (another reservation's row
                 * holds the id)... */
                i_ = 0;
                do
                :: i_ < NREC && !(rec[i_].out == REC_CONFLICT && rec[i_].id == id_ &&
                                  rec[i_].user == u_ && rec[i_].entry == e_) -> i_++
                :: else -> break
                od;
                assert((row[id_].st != S_NONE && row[id_].user == u_ && row[id_].entry == e_) ||
                       i_ < NREC);
                /* ...and the buyer's lookup (order_lookup: the buyer's row, the
                 * journal, then the newest record of the id) does not say
                 * pending, nor 404: when no row of the buyer holds the id, its
                 * newest record is settled id_conflict (rejected) */
                if
                :: !(row[id_].st != S_NONE && row[id_].user == u_) ->
                    i_ = NREC;
                    do
                    :: i_ > 0 && !(rec[i_ - 1].out != REC_FREE && rec[i_ - 1].id == id_ &&
                                   rec[i_ - 1].user == u_) -> i_--
                    :: else -> break
                    od;
                    assert(i_ > 0 && rec[i_ - 1].out == REC_CONFLICT)
                :: else
                fi;
                i_ = 0
#elif defined(PENDING_NEVER_LOST)
                /* without the record (the run item5): a row of that
                 * reservation, or told rejected; without PENDING_NEVER_LOST
                 * the old protocol is checked for the rest (bug 1) */
                assert((row[id_].st != S_NONE && row[id_].entry == e_) ||
                       (R.j[id_].kind == J_RETURNED && R.j[id_].entry == e_))
#else
                skip
#endif
            :: ans[2 * u_ + k_].kind == A_409 || ans[2 * u_ + k_].kind == A_201 ->
                /* still true: a 409's order never took stock; a 201's was confirmed */
                answer(u_, k_, ans[2 * u_ + k_].kind, id_, e_, n_)
            :: else
            fi
        }
    };
    /* a cancel told OK for a pending reservation: it was never confirmed */
    for (u_ : 1 .. NU) {
        if
        :: cancelled_e[u_] != 0 ->
            e_ = cancelled_e[u_]; id_ = ent_id[e_];
            assert(!(row[id_].entry == e_ && row[id_].st != S_CANCELLED_P && row[id_].st != S_NONE))
        :: else
        fi
    };
    /* I2: Redis agrees with PostgreSQL when nothing is in flight, unless a
     * failover lost writes or a rebuild's load was refused (then the
     * reconciler sees a new run id_, or drift, and rebuilds). */
    if
    :: !failed_over && !load_refused ->
        assert(R.stock == pstock);
        active_units(1, i_, n_); assert(R.bought[1] == n_);
        active_units(2, i_, n_); assert(R.bought[2] == n_);
        for (i_ : 0 .. ND - 1) {
            assert(!R.debt[i_].used)
        }
    :: else
    fi
}

init {
    byte e, id, u, tok, dec, reap, i, n, n1, n2, k, jm, dm, rm, rep;
    int rel;
    bit ok, hook;
    /* the SKU created and loaded (epoch 1), and replicated */
    atomic {
        R.loaded = 1; R.built_run = 1; R.stock = STOCK0; R.seq = 0;
#if FAILOVER
        copy_redis(Rrep, R, i);
#endif
        run Buyer(1);
#if NBUYERS == 2
        run Buyer(2);
#endif
        run Writer();
#if NWRITERS == 2
        run Writer();
#endif
#if NREBUILDS >= 1
        run Rebuild();
#endif
#if NREBUILDS == 2
        run Rebuild();
#endif
#if MAXEXPIRE > 0
        run Leases();
#endif
#if FAILOVER
        run Failover();
#endif
#if SWEEPER
        run Sweeper();
#endif
#if ADMIN
        run Admin();
#endif
#if PENDING_RECORD && SETTLER
        run Settler();
#endif
        i = 0
    }
    (_nr_pr == 1);
    printf("--- quiet: leases end, one writer drains the stream\n");
    /* the quiet period */
    atomic {
        R.wlock = 0; R.slock = 0;
        do
        :: R.stream[1] -> e = 1; read_entry(e, id, u);
            write_entry(e, id, u, tok, ok, dec, reap, i, n, n1, n2, hook)
        :: !R.stream[1] && R.stream[2] -> e = 2; read_entry(e, id, u);
            write_entry(e, id, u, tok, ok, dec, reap, i, n, n1, n2, hook)
        :: !R.stream[1] && !R.stream[2] && R.stream[3] -> e = 3; read_entry(e, id, u);
            write_entry(e, id, u, tok, ok, dec, reap, i, n, n1, n2, hook)
        :: !R.stream[1] && !R.stream[2] && !R.stream[3] && R.stream[4] -> e = 4;
            read_entry(e, id, u); write_entry(e, id, u, tok, ok, dec, reap, i, n, n1, n2, hook)
        :: !R.stream[1] && !R.stream[2] && !R.stream[3] && !R.stream[4] && R.stream[5] -> e = 5;
            read_entry(e, id, u); write_entry(e, id, u, tok, ok, dec, reap, i, n, n1, n2, hook)
        :: else -> break
        od;
#if CANCEL || SWEEPER
        /* a sweep: every unsettled return given to Redis */
        lock_try(R.slock, tok, ok);
        pg_fence(R.slock, tok, ok);
        read_unsettled(rel, k);
        if
        :: rel != 0 -> order_release(rel, tok, i, k); mark_settled(rel, k)
        :: else
        fi;
        lock_release(R.slock, tok);
#endif
#if PENDING_RECORD
        /* the reconciler's settler: every record (they are all older than
         * pending_settle_after_ms by now) */
        lock_try(R.slock, tok, ok);
        settle_tx(tok, ok, k, id, u, e, jm, dm, rm, rep, i, n, n1, n2);
        settle_hook(tok, k, id, u, e, jm, dm, rm, rep, i);
#endif
        /* the reconciler's locked check settles adjustment records */
        settle_adjustments();
        printf("--- final checks\n");
        quiet_checks(u, k, id, e, i, n)
    }
}

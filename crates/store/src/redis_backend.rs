//! The shared run store on Redis: several gateway processes (replicas)
//! serve the same runs.
//!
//! Keys (one Redis, not Cluster; `codemode:` prefix):
//! - `codemode:run:{id}` hash: `rec` (the record), `owner`, `state`
//!   (`waiting`/`resuming`), `inst` (who stored or claimed it), `gen`;
//!   expires with the run (PEXPIRE), like its results;
//! - `codemode:res:{id}` hash: request id → outcome;
//! - `codemode:held:{id}` hash: `h<request id>` → a call held for
//!   approval, undecided; `d<request id>` → its decision; `s<request id>`
//!   → the instance that started it once approved; expires with
//!   the run; `codemode:held` set: the runs that may have held calls
//!   (pruned as they go);
//! - `codemode:runs` sorted set: id by expiry (ms), and `codemode:size`
//!   hash / `codemode:bytes` counter: the bounds over all replicas;
//! - `codemode:expired:{id}`: a tombstone, so a late `wait` hears
//!   "expired";
//! - `codemode:inst:{instance}`: a heartbeat with a short expiry: a
//!   process whose heartbeat is gone died, and its calls never finish;
//! - channel `codemode:done:{id}`: a result was stored (payload: request
//!   id); every process subscribes to the pattern once.
//!
//! Each state change is one Lua script, so it is atomic across replicas.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::Value;

use crate::notify::Notifier;
use crate::{
    Bounds, Claimed, HeldCall, RunBackend, StoreError, StoreStats, new_instance_id, now_ms,
};

/// How long a process's heartbeat lives; it is renewed every third of it.
const HEARTBEAT_MS: u64 = 3_000;
/// How long a command may take before the store counts as unreachable.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Tombstones of expired runs live this long.
const TOMBSTONE_MS: u64 = 3_600_000;

/// Drops expired runs from the index and the byte count (the run hashes
/// expire by themselves), leaving tombstones; expects locals `now` (ms)
/// and `tomb` (tombstone ms) and sets `gone`. Shared by the scripts below.
macro_rules! expire_lua {
    () => {
        r"
local gone = redis.call('ZRANGEBYSCORE', 'codemode:runs', '-inf', now)
for _, old in ipairs(gone) do
  local size = redis.call('HGET', 'codemode:size', old)
  if size then redis.call('DECRBY', 'codemode:bytes', size) end
  redis.call('HDEL', 'codemode:size', old)
  redis.call('ZREM', 'codemode:runs', old)
  redis.call('DEL', 'codemode:run:' .. old, 'codemode:res:' .. old, 'codemode:held:' .. old)
  redis.call('SREM', 'codemode:held', old)
  redis.call('SET', 'codemode:expired:' .. old, '1', 'PX', tomb)
end
"
    };
}

/// ARGV: now (ms), tombstone ms. Returns how many runs expired.
const EXPIRE_LUA: &str = concat!(
    "local now, tomb = ARGV[1], ARGV[2]\n",
    expire_lua!(),
    "return #gone\n"
);

/// ARGV: id, owner, record, instance, ttl ms, now ms, max runs, max bytes,
/// tombstone ms. Drops expired runs first (as [`EXPIRE_LUA`]), in the same
/// round trip. Returns {'ok', generation} | {'full', runs} |
/// {'bytes', held, needed}.
const PUT_LUA: &str = concat!(
    "local now, tomb = ARGV[6], ARGV[9]\n",
    expire_lua!(),
    r"
local id = ARGV[1]
local key = 'codemode:run:' .. id
local size = string.len(ARGV[3])
local before = tonumber(redis.call('HGET', 'codemode:size', id) or '-1')
local held = tonumber(redis.call('GET', 'codemode:bytes') or '0')
if before < 0 and redis.call('ZCARD', 'codemode:runs') >= tonumber(ARGV[7]) then
  return {'full', redis.call('ZCARD', 'codemode:runs')}
end
local grow = size - math.max(before, 0)
if held + grow > tonumber(ARGV[8]) then
  return {'bytes', held, grow}
end
local gen = redis.call('HINCRBY', key, 'gen', 1)
redis.call('HSET', key, 'rec', ARGV[3], 'owner', ARGV[2], 'state', 'waiting', 'inst', ARGV[4])
redis.call('PEXPIRE', key, ARGV[5])
redis.call('PEXPIRE', 'codemode:res:' .. id, ARGV[5])
local expires = tonumber(ARGV[6]) + tonumber(ARGV[5])
redis.call('ZADD', 'codemode:runs', expires, id)
redis.call('HSET', 'codemode:size', id, size)
redis.call('INCRBY', 'codemode:bytes', grow)
return {'ok', gen}
"
);

/// ARGV: id, owner, instance, known generation (or ''). Returns
/// {'ok', gen, record (empty when the generation is known), results...} |
/// {'unknown', epoch or ''} | {'expired'} | {'other'} | {'busy', instance}
/// | {'unreadable', what}.
const CLAIM_LUA: &str = r"
local id = ARGV[1]
local key = 'codemode:run:' .. id
local kind = redis.call('TYPE', key).ok
if kind == 'none' then
  if redis.call('EXISTS', 'codemode:expired:' .. id) == 1 or redis.call('ZSCORE', 'codemode:runs', id) then
    return {'expired'}
  end
  return {'unknown', redis.call('GET', 'codemode:epoch') or ''}
end
if kind ~= 'hash' then return {'unreadable', 'a ' .. kind .. ' where a run record belongs'} end
local run = redis.call('HMGET', key, 'state', 'owner', 'inst', 'gen', 'rec')
if not run[1] or not run[2] or not run[4] or not run[5] then
  return {'unreadable', 'a record without its state, owner, generation or snapshot'}
end
if run[2] ~= '*' and run[2] ~= ARGV[2] then return {'other'} end
if run[1] == 'resuming' then return {'busy', run[3]} end
redis.call('HSET', key, 'state', 'resuming', 'inst', ARGV[3])
local record = run[5]
if run[4] == ARGV[4] then record = '' end
local out = {'ok', run[4], record}
local results = redis.call('HGETALL', 'codemode:res:' .. id)
for _, v in ipairs(results) do table.insert(out, v) end
return out
";

/// ARGV: id.
const REMOVE_LUA: &str = r"
local id = ARGV[1]
local size = redis.call('HGET', 'codemode:size', id)
if size then redis.call('DECRBY', 'codemode:bytes', size) end
redis.call('HDEL', 'codemode:size', id)
redis.call('ZREM', 'codemode:runs', id)
redis.call('DEL', 'codemode:run:' .. id, 'codemode:res:' .. id, 'codemode:held:' .. id)
redis.call('SREM', 'codemode:held', id)
return 1
";

/// ARGV: id, request id, entry. Lists the call while the run exists and
/// the call is not decided.
const PUT_HELD_LUA: &str = r"
local id = ARGV[1]
local ttl = redis.call('PTTL', 'codemode:run:' .. id)
if ttl < 0 then return 0 end
local key = 'codemode:held:' .. id
if redis.call('HEXISTS', key, 'd' .. ARGV[2]) == 1 then return 0 end
redis.call('HSET', key, 'h' .. ARGV[2], ARGV[3])
redis.call('PEXPIRE', key, ttl)
redis.call('SADD', 'codemode:held', id)
return 1
";

/// ARGV: id, request id, decision. The first decision wins and tells
/// every process. Returns 1 when this one won.
const DECIDE_HELD_LUA: &str = r"
local id = ARGV[1]
if redis.call('EXISTS', 'codemode:run:' .. id) == 0 then return 0 end
local key = 'codemode:held:' .. id
if redis.call('HDEL', key, 'h' .. ARGV[2]) == 0 then return 0 end
redis.call('HSET', key, 'd' .. ARGV[2], ARGV[3])
redis.call('PUBLISH', 'codemode:done:' .. id, 'd' .. ARGV[2])
return 1
";

/// ARGV: id, request id, instance. Returns the instance that started the
/// call (this one when it marks it), or false when the run is gone.
const START_HELD_LUA: &str = r"
local id = ARGV[1]
if redis.call('EXISTS', 'codemode:run:' .. id) == 0 then return false end
local key = 'codemode:held:' .. id
redis.call('HSETNX', key, 's' .. ARGV[2], ARGV[3])
return redis.call('HGET', key, 's' .. ARGV[2])
";

/// Returns {id, request id, entry, ...} of every undecided held call of a
/// run that still exists; forgets runs that are gone.
const LIST_HELD_LUA: &str = r"
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', 'codemode:held')) do
  if redis.call('EXISTS', 'codemode:run:' .. id) == 0 then
    redis.call('SREM', 'codemode:held', id)
    redis.call('DEL', 'codemode:held:' .. id)
  else
    local fields = redis.call('HGETALL', 'codemode:held:' .. id)
    for i = 1, #fields, 2 do
      if string.sub(fields[i], 1, 1) == 'h' then
        table.insert(out, id)
        table.insert(out, string.sub(fields[i], 2))
        table.insert(out, fields[i + 1])
      end
    end
  end
end
return out
";

/// ARGV: id, request id, outcome. Stores it only while the run exists,
/// and tells every process.
const RESULT_LUA: &str = r"
local id = ARGV[1]
local key = 'codemode:run:' .. id
local ttl = redis.call('PTTL', key)
if ttl < 0 then return 0 end
redis.call('HSET', 'codemode:res:' .. id, ARGV[2], ARGV[3])
redis.call('PEXPIRE', 'codemode:res:' .. id, ttl)
redis.call('PUBLISH', 'codemode:done:' .. id, ARGV[2])
return 1
";

/// What the store holds, counted on the server in one round trip.
/// Returns {waiting, resuming, results, bytes}.
const STATS_LUA: &str = r"
local waiting, resuming, results = 0, 0, 0
for _, id in ipairs(redis.call('ZRANGE', 'codemode:runs', 0, -1)) do
  local state = redis.call('HGET', 'codemode:run:' .. id, 'state')
  if state == 'resuming' then resuming = resuming + 1 elseif state then waiting = waiting + 1 end
  results = results + redis.call('HLEN', 'codemode:res:' .. id)
end
return {waiting, resuming, results, tonumber(redis.call('GET', 'codemode:bytes') or '0')}
";

/// The shared run store.
pub struct RedisBackend {
    client: redis::Client,
    /// The URL without credentials.
    shown: String,
    instance: String,
    /// `codemode:epoch` when this process opened the store: set once by
    /// the first process on an empty server, so it goes when the data goes.
    epoch: String,
    connection: Mutex<Option<redis::Connection>>,
    notifier: Arc<Notifier>,
    stop: Arc<AtomicBool>,
    scripts: Scripts,
}

struct Scripts {
    expire: redis::Script,
    put: redis::Script,
    claim: redis::Script,
    remove: redis::Script,
    result: redis::Script,
    stats: redis::Script,
    put_held: redis::Script,
    decide_held: redis::Script,
    start_held: redis::Script,
    list_held: redis::Script,
}

/// `redis://user:secret@host:6379/0` → `redis://host:6379/0`.
fn without_credentials(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            format!("{scheme}://{rest}")
        }
        None => url.to_owned(),
    }
}

impl RedisBackend {
    /// Connects to `url` (`redis://[user:password@]HOST:PORT/DB`), starts
    /// this process's heartbeat and its result subscription.
    ///
    /// # Errors
    /// `Unavailable` when the URL is malformed or the server cannot be
    /// reached within two seconds.
    pub fn open(url: &str) -> Result<RedisBackend, StoreError> {
        let shown = without_credentials(url);
        let unavailable = |e: &dyn std::fmt::Display| StoreError::Unavailable {
            store: shown.clone(),
            reason: e.to_string(),
        };
        let client = redis::Client::open(url).map_err(|e| unavailable(&e))?;
        let mut connection = connect(&client).map_err(|e| unavailable(&e))?;
        let epoch = redis::cmd("SET")
            .arg("codemode:epoch")
            .arg(new_instance_id())
            .arg("NX")
            .exec(&mut connection)
            .and_then(|()| {
                redis::cmd("GET")
                    .arg("codemode:epoch")
                    .query::<Option<String>>(&mut connection)
            })
            .map_err(|e| unavailable(&e))?
            .unwrap_or_default();
        let backend = RedisBackend {
            client,
            shown: shown.clone(),
            instance: new_instance_id(),
            epoch,
            connection: Mutex::new(Some(connection)),
            notifier: Arc::default(),
            stop: Arc::default(),
            scripts: Scripts {
                expire: redis::Script::new(EXPIRE_LUA),
                put: redis::Script::new(PUT_LUA),
                claim: redis::Script::new(CLAIM_LUA),
                remove: redis::Script::new(REMOVE_LUA),
                result: redis::Script::new(RESULT_LUA),
                stats: redis::Script::new(STATS_LUA),
                put_held: redis::Script::new(PUT_HELD_LUA),
                decide_held: redis::Script::new(DECIDE_HELD_LUA),
                start_held: redis::Script::new(START_HELD_LUA),
                list_held: redis::Script::new(LIST_HELD_LUA),
            },
        };
        backend.heartbeat()?;
        backend.start_threads();
        Ok(backend)
    }

    fn unavailable(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable {
            store: self.shown.clone(),
            reason: e.to_string(),
        }
    }

    /// Runs `f` on the shared connection, reconnecting once when the
    /// connection broke (a Redis restart).
    fn with<T>(
        &self,
        f: impl Fn(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        let mut slot = self
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for attempt in 0..2 {
            if slot.is_none() {
                *slot = Some(connect(&self.client).map_err(|e| self.unavailable(e))?);
            }
            let Some(con) = slot.as_mut() else { continue };
            match f(con) {
                Ok(value) => return Ok(value),
                Err(e) => {
                    // A socket that failed (dropped, reset, timed out) is
                    // never used again: a timed-out command's late reply
                    // would answer the next one. Only such failures are
                    // retried; a server's error answer is final.
                    let broken = e.is_io_error();
                    if broken {
                        *slot = None;
                    }
                    if !(broken && attempt == 0) {
                        return Err(self.unavailable(e));
                    }
                }
            }
        }
        Err(self.unavailable("the connection broke twice"))
    }

    fn heartbeat(&self) -> Result<(), StoreError> {
        let key = format!("codemode:inst:{}", self.instance);
        self.with(|con| {
            redis::cmd("SET")
                .arg(&key)
                .arg(1)
                .arg("PX")
                .arg(HEARTBEAT_MS)
                .query::<()>(con)
        })
    }

    /// The heartbeat thread and the subscriber thread; both stop when the
    /// backend is dropped.
    fn start_threads(&self) {
        let stop = Arc::clone(&self.stop);
        let client = self.client.clone();
        let key = format!("codemode:inst:{}", self.instance);
        let spawned = std::thread::Builder::new()
            .name("codemode-store-heartbeat".into())
            .spawn(move || {
                let mut con = None;
                while !stop.load(Ordering::Relaxed) {
                    if con.is_none() {
                        con = connect(&client).ok();
                    }
                    if let Some(c) = con.as_mut() {
                        let renewed = redis::cmd("SET")
                            .arg(&key)
                            .arg(1)
                            .arg("PX")
                            .arg(HEARTBEAT_MS)
                            .query::<()>(c);
                        if let Err(e) = renewed {
                            tracing::warn!(error = %e, "run store heartbeat failed; reconnecting");
                            con = None;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(HEARTBEAT_MS / 3));
                }
                if let Some(c) = con.as_mut() {
                    let _ = redis::cmd("DEL").arg(&key).query::<()>(c);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the run store heartbeat");
        }
        let stop = Arc::clone(&self.stop);
        let client = self.client.clone();
        let notifier = Arc::clone(&self.notifier);
        let spawned = std::thread::Builder::new()
            .name("codemode-store-results".into())
            .spawn(move || subscribe(&client, &notifier, &stop));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the run store subscription");
        }
    }

    fn read_result(&self, run_id: &str, request_id: u32) -> Result<Option<Vec<u8>>, StoreError> {
        let key = format!("codemode:res:{run_id}");
        self.with(|con| {
            redis::cmd("HGET")
                .arg(&key)
                .arg(request_id)
                .query::<Option<Vec<u8>>>(con)
        })
    }
}

impl Drop for RedisBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn connect(client: &redis::Client) -> redis::RedisResult<redis::Connection> {
    let con = client.get_connection_with_timeout(IO_TIMEOUT)?;
    con.set_read_timeout(Some(IO_TIMEOUT))?;
    con.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(con)
}

/// Forwards `codemode:done:*` messages to this process's waiters, and
/// reconnects after a Redis restart (waiters re-read the store meanwhile).
fn subscribe(client: &redis::Client, notifier: &Notifier, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let mut con = match client.get_connection_with_timeout(IO_TIMEOUT) {
            Ok(con) => con,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
        };
        let mut pubsub = con.as_pubsub();
        if pubsub.psubscribe("codemode:done:*").is_err()
            || pubsub
                .set_read_timeout(Some(Duration::from_millis(500)))
                .is_err()
        {
            continue;
        }
        while !stop.load(Ordering::Relaxed) {
            match pubsub.get_message() {
                Ok(msg) => {
                    if let Some(run_id) = msg.get_channel_name().strip_prefix("codemode:done:") {
                        notifier.notify(run_id);
                    }
                }
                Err(e) if e.is_timeout() => {}
                Err(_) => break,
            }
        }
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => text(other)?.parse().ok(),
    }
}

impl RunBackend for RedisBackend {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    fn instance(&self) -> &str {
        &self.instance
    }

    fn put(
        &self,
        run_id: &str,
        owner: &str,
        record: &[u8],
        ttl: Duration,
        bounds: Bounds,
    ) -> Result<u64, StoreError> {
        let now = now_ms();
        let ttl_ms = (ttl.as_millis() as u64).max(1);
        let reply: Vec<Value> = self.with(|con| {
            self.scripts
                .put
                .arg(run_id)
                .arg(owner)
                .arg(record)
                .arg(&self.instance)
                .arg(ttl_ms)
                .arg(now)
                .arg(bounds.max_runs)
                .arg(bounds.max_bytes)
                .arg(TOMBSTONE_MS)
                .invoke(con)
        })?;
        let tag = reply.first().and_then(text).unwrap_or_default();
        match tag.as_str() {
            "ok" => reply
                .get(1)
                .and_then(number)
                .ok_or_else(|| self.unavailable("a malformed reply to put")),
            "full" => Err(StoreError::Full {
                limit: bounds.max_runs,
            }),
            "bytes" => Err(StoreError::BytesFull {
                limit: bounds.max_bytes,
                held: reply.get(1).and_then(number).unwrap_or(0),
                needed: reply.get(2).and_then(number).unwrap_or(0),
            }),
            other => Err(self.unavailable(format!("an unexpected reply to put: {other}"))),
        }
    }

    fn claim(&self, run_id: &str, owner: &str, known: Option<u64>) -> Result<Claimed, StoreError> {
        let known = known.map_or_else(String::new, |g| g.to_string());
        let reply: Vec<Value> = self.with(|con| {
            self.scripts
                .claim
                .arg(run_id)
                .arg(owner)
                .arg(&self.instance)
                .arg(&known)
                .invoke(con)
        })?;
        let tag = reply.first().and_then(text).unwrap_or_default();
        match tag.as_str() {
            "ok" => {
                let generation = reply
                    .get(1)
                    .and_then(number)
                    .ok_or_else(|| self.unavailable("a malformed claim"))?;
                let record = match reply.get(2) {
                    Some(Value::BulkString(b)) => b.clone(),
                    _ => return Err(self.unavailable("a claim without a record")),
                };
                let mut results = Vec::new();
                for pair in reply.get(3..).unwrap_or_default().chunks(2) {
                    if let [key, Value::BulkString(outcome)] = pair
                        && let Some(request_id) = text(key).and_then(|k| k.parse().ok())
                    {
                        results.push((request_id, outcome.clone()));
                    }
                }
                Ok(Claimed {
                    record,
                    generation,
                    results,
                })
            }
            "unknown" => {
                // The epoch this process saw at open is gone or replaced:
                // the server lost its data since (restart without
                // persistence, flush), so "never existed" would mislead.
                let epoch = reply.get(1).and_then(text).unwrap_or_default();
                Err(if epoch == self.epoch {
                    StoreError::Unknown
                } else {
                    StoreError::Lost {
                        store: self.shown.clone(),
                    }
                })
            }
            "unreadable" => Err(StoreError::Unreadable {
                store: self.shown.clone(),
                reason: reply.get(1).and_then(text).unwrap_or_default(),
            }),
            "expired" => Err(StoreError::Expired),
            "other" => Err(StoreError::OtherOwner),
            "busy" => {
                let instance = reply.get(1).and_then(text).unwrap_or_default();
                Err(if self.instance_alive(&instance) {
                    StoreError::Busy { instance }
                } else {
                    StoreError::Interrupted { instance }
                })
            }
            other => Err(self.unavailable(format!("an unexpected reply to claim: {other}"))),
        }
    }

    fn remove(&self, run_id: &str) -> Result<(), StoreError> {
        self.with(|con| self.scripts.remove.arg(run_id).invoke::<()>(con))
    }

    fn put_result(&self, run_id: &str, request_id: u32, outcome: &[u8]) -> Result<(), StoreError> {
        self.with(|con| {
            self.scripts
                .result
                .arg(run_id)
                .arg(request_id)
                .arg(outcome)
                .invoke::<()>(con)
        })?;
        // This process's own waiters hear it through the subscription too;
        // waking them now saves the round trip.
        self.notifier.notify(run_id);
        Ok(())
    }

    fn await_result(
        &self,
        run_id: &str,
        request_id: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.notifier
            .wait_for(run_id, timeout, Duration::from_secs(1), || {
                self.read_result(run_id, request_id)
            })
    }

    fn put_held(&self, run_id: &str, request_id: u32, entry: &[u8]) -> Result<(), StoreError> {
        self.with(|con| {
            self.scripts
                .put_held
                .arg(run_id)
                .arg(request_id)
                .arg(entry)
                .invoke::<()>(con)
        })
    }

    fn list_held(&self) -> Result<Vec<HeldCall>, StoreError> {
        let reply: Vec<Value> = self.with(|con| self.scripts.list_held.invoke(con))?;
        Ok(reply
            .chunks(3)
            .filter_map(|triple| match triple {
                [run_id, request_id, Value::BulkString(entry)] => Some(HeldCall {
                    run_id: text(run_id)?,
                    request_id: text(request_id)?.parse().ok()?,
                    entry: entry.clone(),
                }),
                _ => None,
            })
            .collect())
    }

    fn decide_held(
        &self,
        run_id: &str,
        request_id: u32,
        decision: &[u8],
    ) -> Result<bool, StoreError> {
        let won: i64 = self.with(|con| {
            self.scripts
                .decide_held
                .arg(run_id)
                .arg(request_id)
                .arg(decision)
                .invoke(con)
        })?;
        if won == 1 {
            self.notifier.notify(run_id);
        }
        Ok(won == 1)
    }

    fn start_held(&self, run_id: &str, request_id: u32) -> Result<Option<String>, StoreError> {
        self.with(|con| {
            self.scripts
                .start_held
                .arg(run_id)
                .arg(request_id)
                .arg(&self.instance)
                .invoke::<Option<String>>(con)
        })
    }

    fn await_decision(
        &self,
        run_id: &str,
        request_id: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let key = format!("codemode:held:{run_id}");
        let field = format!("d{request_id}");
        self.notifier
            .wait_for(run_id, timeout, Duration::from_secs(1), || {
                self.with(|con| {
                    redis::cmd("HGET")
                        .arg(&key)
                        .arg(&field)
                        .query::<Option<Vec<u8>>>(con)
                })
            })
    }

    fn instance_alive(&self, instance: &str) -> bool {
        if instance == self.instance {
            return true;
        }
        let key = format!("codemode:inst:{instance}");
        // Unreachable store: assume alive (a call is never declared
        // interrupted on a network blip).
        self.with(|con| redis::cmd("EXISTS").arg(&key).query::<bool>(con))
            .unwrap_or(true)
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        let now = now_ms();
        let counts: Vec<u64> = self.with(|con| {
            self.scripts
                .expire
                .arg(now)
                .arg(TOMBSTONE_MS)
                .invoke::<()>(con)?;
            self.scripts.stats.invoke(con)
        })?;
        match counts.as_slice() {
            [waiting, resuming, results, bytes] => Ok(StoreStats {
                waiting: *waiting,
                resuming: *resuming,
                bytes: *bytes,
                results: *results,
            }),
            _ => Err(self.unavailable("a malformed reply to stats")),
        }
    }

    fn expire(&self) -> Result<usize, StoreError> {
        let now = now_ms();
        self.with(|con| {
            self.scripts
                .expire
                .arg(now)
                .arg(TOMBSTONE_MS)
                .invoke::<usize>(con)
        })
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::testing::RedisServer;
    use std::time::Instant;

    const BOUNDS: Bounds = Bounds {
        max_runs: 100,
        max_bytes: 1 << 20,
    };
    const TTL: Duration = Duration::from_secs(60);
    /// Longer than any test waits: a waiter that returns sooner was woken.
    const NO_RECHECK: Duration = Duration::from_secs(600);

    fn raw(server: &RedisServer) -> redis::Connection {
        redis::Client::open(server.url())
            .and_then(|client| client.get_connection())
            .expect("connects to the test's redis-server")
    }

    /// Subscribed connections on the server (each open backend holds one).
    fn subscriptions(con: &mut redis::Connection) -> usize {
        redis::cmd("CLIENT")
            .arg(&["LIST", "TYPE", "pubsub"])
            .query::<String>(con)
            .expect("CLIENT LIST")
            .lines()
            .count()
    }

    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < Duration::from_secs(20), "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A thread waiting on a backend's notifier alone (no periodic
    /// re-read) until `read` yields.
    struct Waiter<T>(std::thread::JoinHandle<(Result<Option<T>, StoreError>, Duration)>);

    /// How long a [`Waiter`] waits at most; it reads once more at the end,
    /// so only returning well before it shows it was woken.
    const WAITER_TIMEOUT: Duration = Duration::from_secs(20);

    impl<T> Waiter<T> {
        fn start(
            backend: &Arc<RedisBackend>,
            run_id: &'static str,
            read: impl Fn(&RedisBackend) -> Result<Option<T>, StoreError> + Send + 'static,
        ) -> Waiter<T>
        where
            T: Send + 'static,
        {
            let backend = Arc::clone(backend);
            let handle = std::thread::spawn(move || {
                let started = Instant::now();
                let got = backend
                    .notifier
                    .wait_for(run_id, WAITER_TIMEOUT, NO_RECHECK, || read(&backend));
                (got, started.elapsed())
            });
            // Let it take its first (empty) read and sleep.
            std::thread::sleep(Duration::from_millis(200));
            Waiter(handle)
        }

        /// What it got; fails unless a notification woke it.
        fn woken(self) -> Result<Option<T>, StoreError> {
            let (got, took) = self.0.join().expect("joins");
            assert!(took < WAITER_TIMEOUT / 2, "not woken: it waited {took:?}");
            got
        }
    }

    #[test]
    fn replies_are_read_from_every_kind_redis_sends_and_nothing_else() {
        assert_eq!(text(&Value::BulkString(b"ok".to_vec())), Some("ok".into()));
        assert_eq!(text(&Value::SimpleString("ok".into())), Some("ok".into()));
        assert_eq!(text(&Value::Int(-7)), Some("-7".into()));
        assert_eq!(text(&Value::BulkString(vec![0xff, 0xfe])), None);
        assert_eq!(text(&Value::Nil), None);
        assert_eq!(text(&Value::Array(vec![Value::Int(1)])), None);
        assert_eq!(number(&Value::Int(42)), Some(42));
        assert_eq!(number(&Value::Int(-1)), None);
        assert_eq!(number(&Value::BulkString(b"17".to_vec())), Some(17));
        assert_eq!(number(&Value::SimpleString("9".into())), Some(9));
        assert_eq!(number(&Value::BulkString(b"x".to_vec())), None);
        assert_eq!(number(&Value::Nil), None);
    }

    #[test]
    fn a_result_stored_by_another_process_wakes_a_waiter_here_through_the_subscription() {
        let server = RedisServer::start();
        let mut con = raw(&server);
        let here = Arc::new(RedisBackend::open(&server.url()).expect("connects"));
        let there = RedisBackend::open(&server.url()).expect("connects");
        assert_eq!(here.describe(), server.url());
        until("both backends subscribe", || subscriptions(&mut con) == 2);
        there.put("run_x", "o", b"rec", TTL, BOUNDS).expect("put");
        let waiter = Waiter::start(&here, "run_x", |b| b.read_result("run_x", 4));
        there.put_result("run_x", 4, b"done").expect("result");
        assert_eq!(
            waiter.woken(),
            Ok(Some(b"done".to_vec())),
            "only the subscription tells this process"
        );
        // Dropping a backend ends its subscription (and heartbeat).
        drop(there);
        until("the dropped backend unsubscribes", || {
            subscriptions(&mut con) == 1
        });
    }

    #[test]
    fn results_and_decisions_stored_here_wake_waiters_here_without_the_subscription() {
        let server = RedisServer::start();
        let mut con = raw(&server);
        let here = Arc::new(RedisBackend::open(&server.url()).expect("connects"));
        until("the backend subscribes", || subscriptions(&mut con) == 1);
        here.stop.store(true, Ordering::Relaxed);
        until("the subscription ends", || subscriptions(&mut con) == 0);
        here.put("run_l", "o", b"rec", TTL, BOUNDS).expect("put");

        let waiter = Waiter::start(&here, "run_l", |b| b.read_result("run_l", 1));
        here.put_result("run_l", 1, b"one").expect("result");
        assert_eq!(waiter.woken(), Ok(Some(b"one".to_vec())));

        here.put_held("run_l", 2, b"held").expect("held");
        let waiter = Waiter::start(&here, "run_l", |b| {
            b.with(|con| {
                redis::cmd("HGET")
                    .arg("codemode:held:run_l")
                    .arg("d2")
                    .query::<Option<Vec<u8>>>(con)
            })
        });
        assert_eq!(here.decide_held("run_l", 2, b"yes"), Ok(true));
        assert_eq!(waiter.woken(), Ok(Some(b"yes".to_vec())));
        assert_eq!(
            here.decide_held("run_l", 2, b"no"),
            Ok(false),
            "the first decision wins"
        );
    }

    #[test]
    fn a_servers_error_answer_is_final_and_keeps_the_connection() {
        let server = RedisServer::start();
        let store = RedisBackend::open(&server.url()).expect("connects");
        let client_id = || {
            store
                .with(|con| redis::cmd("CLIENT").arg("ID").query::<i64>(con))
                .expect("CLIENT ID")
        };
        let before = client_id();
        let tries = std::sync::atomic::AtomicUsize::new(0);
        let answer = store.with(|con| {
            tries.fetch_add(1, Ordering::SeqCst);
            redis::cmd("NO.SUCH.COMMAND").query::<()>(con)
        });
        assert!(
            matches!(&answer, Err(StoreError::Unavailable { reason, .. }) if reason.contains("NO.SUCH.COMMAND") || reason.contains("unknown command")),
            "{answer:?}"
        );
        assert_eq!(tries.load(Ordering::SeqCst), 1, "not retried");
        assert_eq!(client_id(), before, "the connection is kept");
    }

    /// `cmdstat_<command>` calls from `INFO commandstats`.
    fn calls_of(con: &mut redis::Connection, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(con)
            .expect("INFO");
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    fn pubsub_client_ids(con: &mut redis::Connection) -> Vec<String> {
        let list: String = redis::cmd("CLIENT")
            .arg(&["LIST", "TYPE", "pubsub"])
            .query(con)
            .expect("CLIENT LIST");
        let mut ids: Vec<String> = list
            .lines()
            .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
            .map(str::to_owned)
            .collect();
        ids.sort();
        ids
    }

    #[test]
    fn heartbeat_and_subscription_last_while_idle_and_come_back_after_a_restart() {
        let mut server = RedisServer::start();
        let mut con = raw(&server);
        let here = Arc::new(RedisBackend::open(&server.url()).expect("connects"));
        let there = RedisBackend::open(&server.url()).expect("connects");
        until("both backends subscribe", || subscriptions(&mut con) == 2);
        let subscribed = pubsub_client_ids(&mut con);
        let sets = calls_of(&mut con, "set");
        // Past the heartbeat's lifetime: renewed, at its pace, not in a
        // busy loop; the subscriptions were idle but not reconnected.
        std::thread::sleep(Duration::from_millis(HEARTBEAT_MS + 1_000));
        assert!(here.instance_alive(there.instance()));
        assert!(there.instance_alive(here.instance()));
        let renewals = calls_of(&mut con, "set") - sets;
        assert!(
            (4..=20).contains(&renewals),
            "two heartbeats over 4 s renew every second: {renewals} SETs"
        );
        assert_eq!(pubsub_client_ids(&mut con), subscribed);

        server.restart();
        let mut con = raw(&server);
        until("both backends subscribe again", || {
            subscriptions(&mut con) == 2
        });
        there.put("run_r", "o", b"rec", TTL, BOUNDS).expect("put");
        let waiter = Waiter::start(&here, "run_r", |b| b.read_result("run_r", 1));
        there.put_result("run_r", 1, b"after").expect("result");
        assert_eq!(waiter.woken(), Ok(Some(b"after".to_vec())));
    }

    #[test]
    fn expire_counts_the_runs_it_expired() {
        let server = RedisServer::start();
        let store = RedisBackend::open(&server.url()).expect("connects");
        // Every put expires what is due first, so all three go in before
        // the first two are due.
        for id in ["run_1", "run_2"] {
            store
                .put(id, "o", b"x", Duration::from_millis(300), BOUNDS)
                .expect("put");
        }
        store.put("run_3", "o", b"x", TTL, BOUNDS).expect("put");
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(store.expire(), Ok(2));
        assert_eq!(store.expire(), Ok(0));
        assert_eq!(
            store.claim("run_1", "o", None).err(),
            Some(StoreError::Expired)
        );
    }

    #[test]
    fn a_dropped_connection_is_replaced_once_and_the_command_goes_through() {
        let server = RedisServer::start();
        let store = RedisBackend::open(&server.url()).expect("connects");
        store.put("run_c", "o", b"x", TTL, BOUNDS).expect("put");
        let _: () = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
            .query(&mut raw(&server))
            .expect("CLIENT KILL");
        assert_eq!(store.stats().map(|s| s.waiting), Ok(1));
    }

    #[test]
    fn a_command_that_timed_out_is_retried_once_on_a_new_connection_and_its_late_reply_never_read()
    {
        let server = RedisServer::start();
        let store = RedisBackend::open(&server.url()).expect("connects");
        store.put("run_t", "o", b"x", TTL, BOUNDS).expect("put");
        let mut con = raw(&server);
        let pause = |con: &mut redis::Connection, ms: u64| {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(ms)
                .arg("WRITE")
                .query(con)
                .expect("CLIENT PAUSE");
        };
        // Scripts count as writes: the first try times out after 2 s, the
        // retry on a new connection is answered once the pause ends.
        pause(&mut con, 3_000);
        assert_eq!(store.stats().map(|s| s.waiting), Ok(1));
        // Both tries time out: unavailable, and the connection that may
        // still get the late reply is not used again.
        pause(&mut con, 5_000);
        assert!(matches!(store.stats(), Err(StoreError::Unavailable { .. })));
        std::thread::sleep(Duration::from_millis(1_500));
        store.put_result("run_t", 1, b"late?").expect("result");
        assert_eq!(store.read_result("run_t", 1), Ok(Some(b"late?".to_vec())));
    }

    #[test]
    fn shown_urls_carry_no_credentials() {
        assert_eq!(
            without_credentials("redis://user:s3cret@db.internal:6379/2"),
            "redis://db.internal:6379/2"
        );
        assert_eq!(
            without_credentials("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
    }
}

/* fh.cuda: device queries, streams and events (thin over fh/runtime.h).
 * Every query works without a GPU; anything else raises CudaError. */
#include <stdio.h>
#include <string.h>

#include "binding.h"
#include "fh/bench_aid.h"
#include "fh/cuda_alloc.h"
#include "fh/trace.h"

static int checkindex(lua_State *L, int idx, const char *fn) {
  if (lua_isnoneornil(L, idx)) return fh_cuda_current_device();
  if (lua_type(L, idx) == LUA_TSTRING) {
    fh_device d = fh__lua_checkdevice(L, idx, fn);
    if (d.type != FH_DEVICE_CUDA) fh__lua_raise(L, FH_ERR_VALUE, "%s: expected a CUDA device, got \"cpu\"", fn);
    return d.index;
  }
  return (int)fh__lua_checkint(L, idx, fn, "device", 0, 1023);
}

static fh_device cuda_dev(int i) {
  fh_device d = {FH_DEVICE_CUDA, i};
  return d;
}

/* checkindex, then raise unless that CUDA device is usable */
static int checkdevice(lua_State *L, int idx, const char *fn) {
  int i = checkindex(L, idx, fn);
  fh__lua_check(L, fh_device_check(cuda_dev(i)));
  return i;
}

/* the stream argument at idx, or the current stream of the current device */
static fh_stream *optstream_arg(lua_State *L, int idx, const char *fn) {
  if (!lua_isnoneornil(L, idx)) return fh__lua_checkstream(L, idx, fn, "stream");
  fh_device d = cuda_dev(fh_cuda_current_device());
  fh__lua_check(L, fh_device_check(d));
  fh_stream *s = NULL;
  fh__lua_check(L, fh_stream_current(d, &s));
  return s;
}

static int l_is_available(lua_State *L) { lua_pushboolean(L, fh_cuda_is_available()); return 1; }
static int l_device_count(lua_State *L) { lua_pushinteger(L, fh_cuda_device_count()); return 1; }
static int l_current_device(lua_State *L) { lua_pushinteger(L, fh_cuda_current_device()); return 1; }
static int l_set_device(lua_State *L) {
  int i = checkdevice(L, 1, "fh.cuda.set_device");
  fh__lua_check(L, fh_cuda_set_device(i));
  return 0;
}
static int l_synchronize(lua_State *L) {
  int i = checkdevice(L, 1, "fh.cuda.synchronize");
  fh__lua_check(L, fh_cuda_synchronize(i));
  return 0;
}
static int l_unavailable_reason(lua_State *L) { lua_pushstring(L, fh_cuda_unavailable_reason()); return 1; }

static int l_get_device_properties(lua_State *L) {
  int i = checkdevice(L, 1, "fh.cuda.get_device_properties");
  fh_device_properties p;
  fh__lua_check(L, fh_cuda_get_device_properties(i, &p));
  lua_createtable(L, 0, 5);
  lua_pushstring(L, p.name);
  lua_setfield(L, -2, "name");
  lua_pushnumber(L, (lua_Number)p.total_memory);
  lua_setfield(L, -2, "total_memory");
  lua_pushinteger(L, p.major);
  lua_setfield(L, -2, "major");
  lua_pushinteger(L, p.minor);
  lua_setfield(L, -2, "minor");
  lua_pushinteger(L, p.multi_processor_count);
  lua_setfield(L, -2, "multi_processor_count");
  return 1;
}

/* ---- streams ------------------------------------------------------------ */
static const char *const stream_opts[] = {"device", "priority", "name", NULL};

static int l_stream_new(lua_State *L) {
  const char *fn = "fh.cuda.Stream";
  fh__lua_checkopts(L, 1, fn, stream_opts);
  int dev = fh_cuda_current_device(), prio = 0;
  const char *name = NULL;
  if (lua_istable(L, 1)) {
    lua_getfield(L, 1, "device");
    if (!lua_isnil(L, -1)) dev = checkindex(L, lua_gettop(L), fn);
    lua_getfield(L, 1, "priority");
    if (!lua_isnil(L, -1)) prio = (int)fh__lua_checkint(L, lua_gettop(L), fn, "priority", -1000, 1000);
    lua_getfield(L, 1, "name");
    if (!lua_isnil(L, -1)) {
      if (lua_type(L, -1) != LUA_TSTRING)
        return fh__lua_raise(L, FH_ERR_TYPE, "%s: option 'name' expected a string, got %s", fn,
                             fh__lua_typename(L, -1));
      size_t len = 0;
      name = lua_tolstring(L, -1, &len);
      if (len >= FH_STREAM_NAME_MAX)
        return fh__lua_raise(L, FH_ERR_VALUE, "%s: option 'name' must be shorter than %d bytes, got %d", fn,
                             FH_STREAM_NAME_MAX, (int)len);
    }
    lua_pop(L, 3);
  }
  fh__lua_check(L, fh_device_check(cuda_dev(dev)));
  fh_stream_box *b = fh__lua_newbox(L, sizeof *b, FH_STREAM_MT);
  fh__lua_check(L, fh_stream_new(cuda_dev(dev), prio, &b->s));
  if (name) fh_stream_set_name(b->s, name);
  return 1;
}

/* fh.cuda.stream_priority_range(device): least, greatest (lower number =
 * higher priority; Stream{priority=} is clamped into [greatest, least]) */
static int l_stream_priority_range(lua_State *L) {
  int i = checkdevice(L, 1, "fh.cuda.stream_priority_range");
  int least = 0, greatest = 0;
  fh__lua_check(L, fh_cuda_stream_priority_range(i, &least, &greatest));
  lua_pushinteger(L, least);
  lua_pushinteger(L, greatest);
  return 2;
}

static int s_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  fh_stream_box *b = fh__lua_testudata(L, 1, FH_STREAM_MT);
  if (b && b->s) {
    fh_stream_release(b->s);
    b->s = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}
static fh_stream *sself(lua_State *L, const char *fn) { return fh__lua_checkstream(L, 1, fn, "self"); }
static int s_synchronize(lua_State *L) { fh__lua_check(L, fh_stream_synchronize(sself(L, "Stream:synchronize"))); return 0; }
static int s_query(lua_State *L) {
  bool done = false;
  fh__lua_check(L, fh_stream_query(sself(L, "Stream:query"), &done));
  lua_pushboolean(L, done);
  return 1;
}
static int s_wait_event(lua_State *L) {
  fh_stream *s = sself(L, "Stream:wait_event");
  fh_event *e = fh__lua_checkevent(L, 2, "Stream:wait_event", "event");
  fh__lua_check(L, fh_stream_wait_event(s, e));
  lua_settop(L, 1);
  return 1;
}
static int s_wait_stream(lua_State *L) {
  fh_stream *s = sself(L, "Stream:wait_stream");
  fh_stream *o = fh__lua_checkstream(L, 2, "Stream:wait_stream", "other");
  fh__lua_check(L, fh_stream_wait_stream(s, o));
  lua_settop(L, 1);
  return 1;
}
static int s_record_event(lua_State *L) {
  fh_stream *s = sself(L, "Stream:record_event");
  fh_event_box *b = fh__lua_newbox(L, sizeof *b, FH_EVENT_MT);
  fh__lua_check(L, fh_event_new(false, &b->e));
  fh__lua_check(L, fh_event_record(b->e, s));
  return 1;
}
static int s_index(lua_State *L) {
  fh_stream *s = sself(L, "Stream.__index");
  const char *k = lua_tostring(L, 2);
  if (k) {
    lua_getfield(L, lua_upvalueindex(1), k);
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
    if (strcmp(k, "device") == 0) { fh__lua_push_device(L, fh_stream_device(s)); return 1; }
    if (strcmp(k, "priority") == 0) { lua_pushinteger(L, fh_stream_priority(s)); return 1; }
    if (strcmp(k, "is_default") == 0) { lua_pushboolean(L, fh_stream_is_default(s)); return 1; }
    if (strcmp(k, "id") == 0) { lua_pushnumber(L, (lua_Number)fh_stream_id(s)); return 1; }
    if (strcmp(k, "name") == 0) { lua_pushstring(L, fh_stream_name(s)); return 1; }
  }
  lua_pushnil(L);
  return 1;
}
/* "idle" / "busy" (work pending), or "?" when it cannot be asked now (a
 * capture forbids queries) */
static const char *stream_state(fh_stream *s) {
  if (fh__cuda_any_capture()) return "capturing"; /* queries are forbidden then */
  bool done = false;
  if (fh_stream_query(s, &done) != FH_OK) {
    fh_error_clear();
    return "?";
  }
  return done ? "idle" : "busy";
}
static int s_tostring(lua_State *L) {
  fh_stream *s = sself(L, "Stream.__tostring");
  char buf[FH_DEVICE_NAME_MAX];
  const char *name = fh_stream_name(s);
  lua_pushfstring(L, "fhelium.cuda.Stream(device=%s, id=%d, priority=%d%s%s%s, %s)",
                  fh_device_name(fh_stream_device(s), buf), (int)fh_stream_id(s), fh_stream_priority(s),
                  fh_stream_is_default(s) ? ", default" : "", name[0] ? ", name=" : "", name, stream_state(s));
  return 1;
}
static int s_eq(lua_State *L) {
  fh_stream_box *a = fh__lua_testudata(L, 1, FH_STREAM_MT), *b = fh__lua_testudata(L, 2, FH_STREAM_MT);
  lua_pushboolean(L, a && b && a->s == b->s);
  return 1;
}

static int l_current_stream(lua_State *L) {
  int i = checkdevice(L, 1, "fh.cuda.current_stream");
  fh_stream *s = NULL;
  fh__lua_check(L, fh_stream_current(cuda_dev(i), &s));
  fh__lua_push_stream(L, s);
  return 1;
}
static int l_default_stream(lua_State *L) {
  int i = checkdevice(L, 1, "fh.cuda.default_stream");
  fh_stream *s = NULL;
  fh__lua_check(L, fh_stream_default(cuda_dev(i), &s));
  fh__lua_push_stream(L, s);
  return 1;
}
static int l_set_stream(lua_State *L) {
  fh_stream *s = fh__lua_checkstream(L, 1, "fh.cuda.set_stream", "stream");
  fh_stream_set_current(s);
  return 0;
}

/* _exchange_stream(s): make s current on its device, return the stream
 * that was current there (used by with_stream) */
static int l_exchange_stream(lua_State *L) {
  fh_stream *s = fh__lua_checkstream(L, 1, "fh.cuda.with_stream", "stream");
  fh_stream *prev = NULL;
  fh__lua_check(L, fh_stream_current(fh_stream_device(s), &prev));
  fh__lua_push_stream(L, prev);
  fh_stream_set_current(s);
  return 1;
}

/* ---- events ------------------------------------------------------------- */
static const char *const event_opts[] = {"timing", NULL};
static int l_event_new(lua_State *L) {
  fh__lua_checkopts(L, 1, "fh.cuda.Event", event_opts);
  int timing = fh__lua_optbool(L, 1, "timing", 0, "fh.cuda.Event");
  if (!fh_cuda_is_available()) fh__lua_check(L, fh_device_check(cuda_dev(0)));
  fh_event_box *b = fh__lua_newbox(L, sizeof *b, FH_EVENT_MT);
  fh__lua_check(L, fh_event_new(timing, &b->e));
  return 1;
}
static int e_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  fh_event_box *b = fh__lua_testudata(L, 1, FH_EVENT_MT);
  if (b && b->e) {
    fh_event_release(b->e);
    b->e = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}
static fh_event *eself(lua_State *L, const char *fn) { return fh__lua_checkevent(L, 1, fn, "self"); }
static int e_record(lua_State *L) {
  fh_event *e = eself(L, "Event:record");
  fh_stream *s = optstream_arg(L, 2, "Event:record");
  fh__lua_check(L, fh_event_record(e, s));
  lua_settop(L, 1);
  return 1;
}
static int e_query(lua_State *L) {
  bool done = false;
  fh__lua_check(L, fh_event_query(eself(L, "Event:query"), &done));
  lua_pushboolean(L, done);
  return 1;
}
static int e_synchronize(lua_State *L) { fh__lua_check(L, fh_event_synchronize(eself(L, "Event:synchronize"))); return 0; }
static int e_elapsed_ms(lua_State *L) {
  fh_event *a = eself(L, "Event:elapsed_ms");
  fh_event *b = fh__lua_checkevent(L, 2, "Event:elapsed_ms", "end_event");
  double ms = 0;
  fh__lua_check(L, fh_event_elapsed_ms(a, b, &ms));
  lua_pushnumber(L, ms);
  return 1;
}
static int e_index(lua_State *L) {
  fh_event *e = eself(L, "Event.__index");
  const char *k = lua_tostring(L, 2);
  if (k) {
    lua_getfield(L, lua_upvalueindex(1), k);
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
    if (strcmp(k, "device") == 0) {
      if (fh_event_is_recorded(e)) fh__lua_push_device(L, fh_event_device(e));
      else lua_pushnil(L);
      return 1;
    }
    if (strcmp(k, "recorded") == 0) { lua_pushboolean(L, fh_event_is_recorded(e)); return 1; }
  }
  lua_pushnil(L);
  return 1;
}
static int e_tostring(lua_State *L) {
  fh_event *e = eself(L, "Event.__tostring");
  char buf[FH_DEVICE_NAME_MAX];
  if (fh_event_is_recorded(e)) {
    const char *state = "?";
    bool done = false;
    if (fh__cuda_any_capture()) state = "capturing";
    else if (fh_event_query(e, &done) == FH_OK) state = done ? "complete" : "pending";
    else fh_error_clear();
    lua_pushfstring(L, "fhelium.cuda.Event(recorded on %s stream %d, %s)", fh_device_name(fh_event_device(e), buf),
                    (int)fh_event_stream_id(e), state);
  } else {
    lua_pushliteral(L, "fhelium.cuda.Event(not recorded)");
  }
  return 1;
}

/* ---- memory ------------------------------------------------------------- */
static void push_stats(lua_State *L, const fh_memory_stats *m) {
  lua_createtable(L, 0, 17);
#define STAT(k)                       \
  lua_pushnumber(L, (lua_Number)m->k); \
  lua_setfield(L, -2, #k)
  STAT(allocated);
  STAT(requested);
  STAT(reserved);
  STAT(peak_allocated);
  STAT(peak_reserved);
  STAT(active_blocks);
  STAT(cached_blocks);
  STAT(pending_blocks);
  STAT(deferred_frees);
  STAT(allocations);
  STAT(frees);
  STAT(cuda_allocs);
  STAT(cuda_frees);
  STAT(reuses);
  STAT(stream_events);
  STAT(ooms);
  STAT(pool_reserved);
#undef STAT
}

static int l_memory_stats(lua_State *L) {
  int i = checkdevice(L, 1, "fh.cuda.memory_stats");
  fh_memory_stats m;
  fh__lua_check(L, fh_cuda_memory_stats(i, &m));
  push_stats(L, &m);
  return 1;
}
static int l_reset_peak_memory_stats(lua_State *L) {
  int i = checkdevice(L, 1, "fh.cuda.reset_peak_memory_stats");
  fh__lua_check(L, fh_cuda_reset_peak_memory_stats(i));
  return 0;
}
static int l_pinned_memory_stats(lua_State *L) {
  fh_memory_stats m;
  fh__lua_check(L, fh_pinned_memory_stats(&m));
  push_stats(L, &m);
  return 1;
}
static int l_empty_cache(lua_State *L) {
  fh__lua_check(L, fh_cuda_empty_cache());
  return 0;
}

/* fh.cuda._spin(ms, stream): test aid, a kernel that runs for `ms`. */
static int l_spin(lua_State *L) {
  if (lua_type(L, 1) != LUA_TNUMBER)
    return fh__lua_raise(L, FH_ERR_TYPE, "fh.cuda._spin: argument 1 (ms) expected a number, got %s", fh__lua_typename(L, 1));
  double ms = lua_tonumber(L, 1);
  fh_stream *s = optstream_arg(L, 2, "fh.cuda._spin");
  fh__lua_check(L, fh_cuda_spin(s, ms));
  return 0;
}

/* fh.cuda._fault_kernel(stream): test aid, a kernel that writes out of bounds;
 * raises the CudaError it ends with (the device's context is broken after it). */
static int l_fault_kernel(lua_State *L) {
  fh_stream *s = optstream_arg(L, 1, "fh.cuda._fault_kernel");
  fh_status st = fh_cuda_fault_kernel(s);
  if (st != FH_OK) fh_error_prefix("fh.cuda._fault_kernel");
  fh__lua_check(L, st);
  return 0;
}

/* fh.cuda._mark_broken(n, error_name): test aid (every build), marks cuda:n
 * broken as a sticky error `error_name` would (fh__cuda_mark_broken), so the
 * fail-fast paths can be checked without a GPU. Returns true when it marked
 * the device, false when it was broken already. */
static int l_mark_broken(lua_State *L) {
  int n = (int)fh__lua_checkint(L, 1, "fh.cuda._mark_broken", "device", 0, FH_BROKEN_MAX_DEVICES - 1);
  const char *name = lua_tostring(L, 2);
  if (lua_type(L, 2) != LUA_TSTRING || strncmp(name, "cudaError", 9) != 0)
    return fh__lua_raise(L, FH_ERR_TYPE,
                         "fh.cuda._mark_broken: argument 2 (error_name) expected a CUDA error name (\"cudaError...\"), "
                         "got %s", lua_type(L, 2) == LUA_TSTRING ? name : fh__lua_typename(L, 2));
  lua_pushboolean(L, fh__cuda_mark_broken(n, name, "fh.cuda._mark_broken"));
  return 1;
}

/* fh.cuda._profiler(on): profiling aid (cudaProfilerStart / Stop). */
static int l_profiler(lua_State *L) {
  fh__lua_check(L, fh_cuda_profiler(lua_toboolean(L, 1)));
  return 0;
}

/* fh.cuda._raw_graph_bench(K, random, reps): benchmark aid, the baseline's
 * raw CUDA graph of K adds replayed in this process (fh_cuda_raw_graph_bench
 * on the current device); microseconds per replay. */
static int l_raw_graph_bench(lua_State *L) {
  const char *fn = "fh.cuda._raw_graph_bench";
  int K = (int)fh__lua_checkint(L, 1, fn, "K", 1, 10000);
  bool random = lua_toboolean(L, 2);
  int reps = lua_isnoneornil(L, 3) ? 200 : (int)fh__lua_checkint(L, 3, fn, "reps", 1, 100000);
  double us = 0;
  fh__lua_check(L, fh_cuda_raw_graph_bench(fh_cuda_current_device(), K, reps, random, &us));
  lua_pushnumber(L, us);
  return 1;
}

/* fh.cuda._capture(fn, replays): test aid for capture-private pools. Runs
 * fn() with a fresh stream current while that stream captures a CUDA graph
 * into a fresh pool, then replays the graph `replays` times (default 1) and
 * synchronizes. Returns true plus fn's first result, or false plus the
 * error fn raised (the capture is ended either way). */
static int l_capture(lua_State *L) {
  if (lua_type(L, 1) != LUA_TFUNCTION)
    return fh__lua_raise(L, FH_ERR_TYPE, "fh.cuda._capture: argument 1 (fn) expected a function, got %s", fh__lua_typename(L, 1));
  int replays = lua_isnoneornil(L, 2) ? 1 : (int)fh__lua_checkint(L, 2, "fh.cuda._capture", "replays", 0, 1000);
  fh_device d = cuda_dev(fh_cuda_current_device());
  fh__lua_check(L, fh_device_check(d));
  fh_stream *prev = NULL;
  fh__lua_check(L, fh_stream_current(d, &prev));
  fh_stream_retain(prev);
  lua_settop(L, 1);
  fh__lua_push_stream(L, prev); /* 2: keeps the previous stream alive across errors */
  fh_stream_release(prev);
  fh_stream_box *sb = fh__lua_newbox(L, sizeof *sb, FH_STREAM_MT); /* 3: the capture stream */
  fh__lua_check(L, fh_stream_new(d, 0, &sb->s));
  fh_mempool *pool = NULL;
  fh__lua_check(L, fh_mempool_new(d, &pool));
  fh_status st = fh__cuda_test_capture_begin(sb->s, pool);
  if (st != FH_OK) {
    fh_mempool_free(pool);
    fh__lua_error(L);
  }
  fh_stream_set_current(sb->s);
  lua_pushvalue(L, 1);
  int ok = lua_pcall(L, 0, 1, 0) == 0; /* 4: result or error */
  fh_stream_set_current(prev);
  st = fh__cuda_test_capture_end(sb->s, pool, ok ? replays : 0);
  fh_mempool_free(pool);
  if (!ok) fh_error_clear(); /* fn's error says more than an invalidated capture */
  else if (st != FH_OK) fh__lua_error(L);
  lua_pushboolean(L, ok);
  lua_insert(L, -2);
  return 2;
}

void fh__lua_open_cuda(lua_State *L) {
  static const luaL_Reg smethods[] = {{"synchronize", s_synchronize}, {"query", s_query},
                                      {"wait_event", s_wait_event},   {"wait_stream", s_wait_stream},
                                      {"record_event", s_record_event}, {NULL, NULL}};
  static const luaL_Reg smeta[] = {{"__gc", s_gc}, {"__tostring", s_tostring}, {"__eq", s_eq}, {NULL, NULL}};
  fh__lua_newclass_indexed(L, FH_STREAM_MT, smethods, smeta, s_index);
  {
    static const char *const fields[] = {"device", "priority", "is_default", "id", "name", NULL};
    fh__lua_setfields(L, fields);
  }
  lua_pop(L, 1);
  static const luaL_Reg emethods[] = {{"record", e_record}, {"query", e_query}, {"synchronize", e_synchronize},
                                      {"elapsed_ms", e_elapsed_ms}, {NULL, NULL}};
  static const luaL_Reg emeta[] = {{"__gc", e_gc}, {"__tostring", e_tostring}, {NULL, NULL}};
  fh__lua_newclass_indexed(L, FH_EVENT_MT, emethods, emeta, e_index);
  {
    static const char *const fields[] = {"device", "recorded", NULL};
    fh__lua_setfields(L, fields);
  }
  lua_pop(L, 1);

  static const luaL_Reg fns[] = {{"is_available", l_is_available},
                                 {"device_count", l_device_count},
                                 {"current_device", l_current_device},
                                 {"set_device", l_set_device},
                                 {"synchronize", l_synchronize},
                                 {"unavailable_reason", l_unavailable_reason},
                                 {"get_device_properties", l_get_device_properties},
                                 {"Stream", l_stream_new},
                                 {"stream_priority_range", l_stream_priority_range},
                                 {"current_stream", l_current_stream},
                                 {"default_stream", l_default_stream},
                                 {"set_stream", l_set_stream},
                                 {"_exchange_stream", l_exchange_stream},
                                 {"Event", l_event_new},
                                 {"memory_stats", l_memory_stats},
                                 {"reset_peak_memory_stats", l_reset_peak_memory_stats},
                                 {"pinned_memory_stats", l_pinned_memory_stats},
                                 {"empty_cache", l_empty_cache},
                                 {"_spin", l_spin},
                                 {"_fault_kernel", l_fault_kernel},
                                 {"_mark_broken", l_mark_broken},
                                 {"_profiler", l_profiler},
                                 {"_capture", l_capture},
                                 {"_raw_graph_bench", l_raw_graph_bench},
                                 {NULL, NULL}};
  lua_newtable(L);
  fh__lua_setfuncs_named(L, fns, "fh.cuda.");
  lua_setfield(L, -2, "cuda");
}

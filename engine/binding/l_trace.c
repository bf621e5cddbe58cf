/* fh.trace's engine side (fh/trace.h): start, stop, and the stopped trace
 * as a userdata that lists its events and tracks and writes its JSON. The
 * trace object users see is lua/fhelium/trace.lua's, around this one. */
#include <string.h>

#include "binding.h"
#include "fh/trace.h"

#define FH_TRACE_MT "fhelium.TraceData"

typedef struct trace_box { fh_trace *t; } trace_box;

static int l_trace_start(lua_State *L) {
  fh_status st = fh_trace_start();
  if (st != FH_OK) {
    fh_error_prefix("fh.trace.start");
    fh__lua_error(L);
  }
  return 0;
}

static int l_trace_active(lua_State *L) {
  lua_pushboolean(L, fh_trace_active());
  return 1;
}

static int l_trace_stop(lua_State *L) {
  trace_box *b = fh__lua_newbox(L, sizeof *b, FH_TRACE_MT);
  fh_status st = fh_trace_stop(&b->t);
  if (st != FH_OK) {
    fh_error_prefix("fh.trace.stop");
    fh__lua_error(L);
  }
  return 1;
}

static fh_trace *checktrace(lua_State *L, const char *fn) {
  trace_box *b = fh__lua_testudata(L, 1, FH_TRACE_MT);
  if (b == NULL || b->t == NULL)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: expected trace data, got %s", fn, fh__lua_typename(L, 1));
  return b->t;
}

static int t_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  trace_box *b = fh__lua_testudata(L, 1, FH_TRACE_MT);
  if (b && b->t) {
    fh_trace_free(b->t);
    b->t = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}

static void setnum(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}
static void setstr(lua_State *L, const char *k, const char *v) {
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

/* data:events(): a list of {kind=, name=, detail=, track=, start_us=,
 * dur_us=, bytes=, count=, seq=}, sorted by track then start; track is
 * 1-based into data:tracks(). */
static int t_events(lua_State *L) {
  fh_trace *t = checktrace(L, "trace:events");
  size_t n = fh_trace_nevents(t);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; ++i) {
    const fh_trace_event *e = fh_trace_event_at(t, i);
    lua_createtable(L, 0, 9);
    setstr(L, "kind", fh_trace_kind_name(e->kind));
    setstr(L, "name", e->name);
    setstr(L, "detail", e->detail);
    setnum(L, "track", e->track + 1);
    setnum(L, "start_us", e->start_us);
    setnum(L, "dur_us", e->dur_us);
    setnum(L, "bytes", (double)e->bytes);
    setnum(L, "count", (double)e->count);
    setnum(L, "seq", (double)e->seq);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* data:tracks(): a list of {label=, device=, stream=, name=, priority=,
 * is_default=}; the host track has stream 0 and device "cpu". */
static int t_tracks(lua_State *L) {
  fh_trace *t = checktrace(L, "trace:tracks");
  int n = fh_trace_ntracks(t);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; ++i) {
    const fh_trace_track *tr = fh_trace_track_at(t, i);
    char label[96];
    lua_createtable(L, 0, 6);
    setstr(L, "label", fh_trace_track_label(tr, label, sizeof label));
    fh__lua_push_device(L, tr->device);
    lua_setfield(L, -2, "device");
    setnum(L, "stream", (double)tr->stream_id);
    setstr(L, "name", tr->name);
    setnum(L, "priority", tr->priority);
    lua_pushboolean(L, tr->is_default);
    lua_setfield(L, -2, "is_default");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int t_info(lua_State *L) {
  fh_trace *t = checktrace(L, "trace:info");
  lua_createtable(L, 0, 4);
  setnum(L, "duration_us", fh_trace_duration_us(t));
  setnum(L, "dropped", (double)fh_trace_dropped(t));
  setnum(L, "nevents", (double)fh_trace_nevents(t));
  setnum(L, "ntracks", fh_trace_ntracks(t));
  return 1;
}

/* data:save_json(path) */
static int t_save_json(lua_State *L) {
  fh_trace *t = checktrace(L, "trace:save");
  if (lua_type(L, 2) != LUA_TSTRING)
    return fh__lua_raise(L, FH_ERR_TYPE, "trace:save: argument 1 (path) expected a string, got %s",
                         fh__lua_typename(L, 2));
  fh_status st = fh_trace_save_json(t, lua_tostring(L, 2));
  if (st != FH_OK) {
    fh_error_prefix("trace:save");
    fh__lua_error(L);
  }
  return 0;
}

void fh__lua_open_trace(lua_State *L) {
  static const luaL_Reg methods[] = {{"events", t_events}, {"tracks", t_tracks}, {"info", t_info},
                                     {"save_json", t_save_json}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", t_gc}, {NULL, NULL}};
  fh__lua_newclass(L, FH_TRACE_MT, methods, meta);
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {{"trace_start", l_trace_start},
                                 {"trace_stop", l_trace_stop},
                                 {"trace_active", l_trace_active},
                                 {NULL, NULL}};
  fh__lua_setfuncs(L, fns);
}

/* The `fhelium` executable: LuaJIT with the fhelium module linked in.
 *
 *   fhelium script.lua [args]   run a script; global `arg` as in luajit
 *                               (arg[0] the script, arg[1..] its arguments,
 *                               arg[-1..] what came before); the script also
 *                               receives its arguments as `...`
 *   fhelium -e 'code'           run a chunk (may be repeated, runs in order)
 *   fhelium -i                  start the REPL after the script / -e chunks
 *   fhelium                     the REPL (on a terminal: line editing; with
 *                               stdin piped: reads the pipe, no prompts)
 *   fhelium -                   run stdin as a script
 *   fhelium test [busted args]  busted under this build (fhelium.test_command);
 *                               a script named `test`: fhelium ./test
 *   fhelium --version | --info | --help
 *
 * Exit status: 0 on success; 1 when a chunk, a script or (with stdin piped)
 * any REPL entry raised an error, or a spec of `fhelium test` failed; 2 for
 * a usage error.
 *
 * Errors print as "fhelium: <text>" on stderr. fhelium error objects print
 * as "<kind>: <message>" plus the script line that raised them; string
 * errors print with a stack traceback. Ctrl-C while Lua code runs raises
 * "interrupted!" in that code (as in luajit).
 *
 * The Lua side lives in lua/fhelium; its directory is FHELIUM_LUA_DIR, else
 * the source tree this binary was built from, else the install prefix.
 * `fhelium.core` (the binding) is linked into this binary and preloaded, as
 * is `fhelium.lineinput`, the REPL's line input (below). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>

#include "binding.h"
#include "fh/dist.h"

#ifdef FH_HAVE_EDITLINE
#include <editline/readline.h>
#endif

#ifndef FH_LINE_EDITING_DESC
#define FH_LINE_EDITING_DESC "none"
#endif
#ifndef FH_BUILD_C_COMPILER
#define FH_BUILD_C_COMPILER "?"
#endif
#ifndef FH_BUILD_CUDA_COMPILER
#define FH_BUILD_CUDA_COMPILER ""
#endif
#ifndef FH_BUILD_CUDA_ARCHS
#define FH_BUILD_CUDA_ARCHS ""
#endif

#define FH_HISTORY_MAX 1000

/* ---- Ctrl-C ---------------------------------------------------------------
 * While Lua code runs under interruptible_pcall, SIGINT sets a hook that
 * raises "interrupted!" at the next Lua instruction or return (the lua.c
 * technique: lua_sethook is safe to call from a signal handler; unlike
 * lua.c, no call hook, which LuaJIT also runs when it calls the message
 * handler, before the handler could disarm it).
 * While the REPL waits for a line, SIGINT only sets `sigint_flag`; the read
 * returns and the REPL discards the pending input. LuaJIT never runs hooks
 * inside compiled traces, so a JIT-compiled endless loop ignores the first
 * Ctrl-C; a second one then terminates the process.
 *
 * The hook must never fire inside the message handler: when a C call that
 * was blocked when Ctrl-C came (a read interrupted by the signal, a long
 * kernel) raises its own error, the armed hook would raise again while the
 * handler runs, and Lua reports "error in error handling" instead. So every
 * message handler of an interruptible call is C and starts with
 * take_interrupt() (no Lua instruction runs before it): it disarms a
 * pending hook and, when there was one,
 * replaces the error by "interrupted!" (the user asked to stop; that is
 * what they see). A signal that comes while a handler runs only sets the
 * flag (`handling_error`). */
static lua_State *signal_L;
static volatile sig_atomic_t sigint_flag;
static volatile sig_atomic_t handling_error;

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static void on_sigint_run(int sig) {
  if (sigint_flag) {
    /* the first Ctrl-C did not stop it (JIT-compiled loops never look at
     * hooks): the second one terminates as usual */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  sigint_flag = 1;
  if (!handling_error) lua_sethook(signal_L, interrupt_hook, LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* The start of every message handler (the error is at index 1): no hook
 * fires while the handler runs, and a Ctrl-C that came before the error
 * wins over it. */
static void take_interrupt(lua_State *L) {
  handling_error = 1;
  if (lua_gethook(L) == interrupt_hook) {
    lua_sethook(L, NULL, 0, 0);
    lua_pushliteral(L, "interrupted!");
    lua_replace(L, 1);
  }
}

static void on_sigint_read(int sig) {
  (void)sig;
  sigint_flag = 1;
}

/* Installs `fn` for SIGINT (no SA_RESTART, so blocking reads return EINTR). */
static void sigint_set(void (*fn)(int), struct sigaction *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, old);
}

/* lua_pcall(L, nargs, nres, msgh) with Ctrl-C raising "interrupted!". */
static int interruptible_pcall(lua_State *L, int nargs, int nres, int msgh) {
  struct sigaction old;
  signal_L = L;
  sigint_flag = 0;
  handling_error = 0;
  sigint_set(on_sigint_run, &old);
  int st = lua_pcall(L, nargs, nres, msgh);
  sigaction(SIGINT, &old, NULL);
  handling_error = 0;
  if (lua_gethook(L) == interrupt_hook) lua_sethook(L, NULL, 0, 0); /* a late signal */
  return st;
}

/* ---- fhelium.lineinput: the REPL's line input ------------------------------
 * readline(prompt) -> line | nil (end of input) | false (Ctrl-C: discard).
 * On a terminal it edits with libedit when built with it (history, tab
 * completion through the Lua completer); otherwise, and always when stdin is
 * not a terminal, it reads a plain line and prints no prompt. */
static int completer_ref = LUA_NOREF;

#ifdef FH_HAVE_EDITLINE
static int history_enabled;
static char *history_path;
static lua_State *completion_L;

/* Calls the Lua completer(text, line) -> {candidates}; returns a malloc'd,
 * NULL-terminated array whose first entry is the longest common prefix of
 * the candidates (readline's convention), or NULL. Never raises. */
static char **complete_cb(const char *text, int start, int end) {
  (void)start;
  (void)end;
  rl_attempted_completion_over = 1; /* never fall back to file names */
  lua_State *L = completion_L;
  if (L == NULL || completer_ref == LUA_NOREF || !lua_checkstack(L, 4)) return NULL;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, completer_ref);
  lua_pushstring(L, text);
  lua_pushstring(L, rl_line_buffer ? rl_line_buffer : "");
  char **m = NULL;
  if (lua_pcall(L, 2, 1, 0) == 0 && lua_istable(L, -1)) {
    int n = (int)lua_objlen(L, -1), k = 0;
    if (n > 0 && (m = fh_calloc((size_t)n + 2, sizeof *m)) != NULL) {
      for (int i = 1; i <= n; ++i) {
        lua_rawgeti(L, -1, i);
        const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        char *c = s ? fh_strdup(s) : NULL;
        lua_pop(L, 1);
        if (c) m[++k] = c;
      }
      if (k == 0) {
        fh_free(m);
        m = NULL;
      } else {
        size_t lcp = strlen(m[1]);
        for (int i = 2; i <= k; ++i) {
          size_t j = 0;
          while (j < lcp && m[i][j] == m[1][j]) ++j;
          lcp = j;
        }
        m[0] = fh_strndup(m[1], lcp);
        if (m[0] == NULL) {
          for (int i = 1; i <= k; ++i) fh_free(m[i]);
          fh_free(m);
          m = NULL;
        }
      }
    }
  }
  lua_settop(L, top);
  return m;
}

static int editline_initialized;
static void editline_init(void) {
  if (editline_initialized) return;
  editline_initialized = 1;
  rl_readline_name = "fhelium"; /* ~/.editrc entries may start with "fhelium:" */
  /* words for completion: whole Lua access paths (a.b:c), not file names */
  static const char breaks[] = " \t\n\"\\'`@$><=;|&{(+-*/%^~#,}";
  rl_basic_word_break_characters = breaks;
  rl_completer_word_break_characters = (char *)breaks;
  rl_completion_append_character = '\0';
  rl_attempted_completion_function = complete_cb;
  stifle_history(FH_HISTORY_MAX);
}
#endif

/* A plain line from stdin (no editing). Returns 1 with the line pushed, 0 at
 * end of input, -1 when interrupted (Ctrl-C). */
static int read_plain_line(lua_State *L, const char *prompt, int tty) {
  if (tty) {
    fputs(prompt, stdout);
    fflush(stdout);
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int c, any = 0;
  for (;;) {
    c = getchar();
    if (c == EOF) {
      if (ferror(stdin) && errno == EINTR) {
        clearerr(stdin);
        if (sigint_flag) return -1;
        continue;
      }
      break;
    }
    if (c == '\n') break;
    luaL_addchar(&b, (char)c);
    any = 1;
  }
  if (c == EOF && !any) return 0;
  luaL_pushresult(&b);
  return 1;
}

static int l_readline(lua_State *L) {
  const char *prompt = luaL_optstring(L, 1, "> ");
  int tty = isatty(0);
  struct sigaction old;
  if (tty) {
    sigint_flag = 0;
    sigint_set(on_sigint_read, &old);
  }
  int r;
#ifdef FH_HAVE_EDITLINE
  if (tty) {
    editline_init();
    completion_L = L;
    char *line = readline(prompt);
    completion_L = NULL;
    if (line) {
      lua_pushstring(L, line);
      fh_free(line);
      r = 1;
    } else {
      r = sigint_flag ? -1 : 0;
    }
  } else
#endif
    r = read_plain_line(L, prompt, tty);
  if (tty) {
    sigaction(SIGINT, &old, NULL);
    if (r != 1 && sigint_flag) r = -1;
  }
  if (r == 1) {
    /* the line wins when Ctrl-C came after it was complete */
    return 1;
  }
  if (r < 0) {
    lua_pushboolean(L, 0);
    return 1;
  }
  return 0;
}

/* history_open(path): read `path` (if it exists) and save the history there
 * after every add_history. No-op without libedit. Returns true when history
 * is kept. */
static int l_history_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
#ifdef FH_HAVE_EDITLINE
  editline_init();
  char *copy = fh_strdup(path);
  if (copy == NULL) return luaL_error(L, "out of memory");
  fh_free(history_path);
  history_path = copy;
  history_enabled = 1;
  if (access(path, R_OK) == 0) read_history(path);
  lua_pushboolean(L, 1);
#else
  (void)path;
  lua_pushboolean(L, 0);
#endif
  return 1;
}

/* add_history(line): add and save. Returns true, or false and a message
 * when the file could not be written. */
static int l_add_history(lua_State *L) {
  const char *line = luaL_checkstring(L, 1);
#ifdef FH_HAVE_EDITLINE
  if (history_enabled && line[0] != '\0') {
    add_history(line);
    int e = write_history(history_path);
    if (e != 0) {
      lua_pushboolean(L, 0);
      lua_pushfstring(L, "cannot write %s: %s", history_path, strerror(e));
      return 2;
    }
  }
#else
  (void)line;
#endif
  lua_pushboolean(L, 1);
  return 1;
}

static int l_set_completer(lua_State *L) {
  if (lua_isnil(L, 1)) {
    luaL_unref(L, LUA_REGISTRYINDEX, completer_ref);
    completer_ref = LUA_NOREF;
    return 0;
  }
  luaL_checktype(L, 1, LUA_TFUNCTION);
  luaL_unref(L, LUA_REGISTRYINDEX, completer_ref);
  lua_pushvalue(L, 1);
  completer_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

static int l_isatty(lua_State *L) {
  lua_Number fd = luaL_optnumber(L, 1, 0);
  lua_pushboolean(L, fd >= 0 && fd <= 2 && isatty((int)fd));
  return 1;
}

/* The message handler l_xpcall installs: take_interrupt, then the Lua
 * handler (upvalue 1) on the error. The Lua handler therefore runs one C
 * frame above the frame that raised. */
static int guarded_msgh(lua_State *L) {
  lua_settop(L, 1);
  take_interrupt(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 1, 1);
  handling_error = 0;
  return 1;
}

/* xpcall(fn, msgh, ...) with Ctrl-C raising "interrupted!" inside fn:
 * returns true, results... or false, msgh(err). msgh is called through a
 * C frame (guarded_msgh), so its level 2 is that frame and the frames
 * that raised start at level 3. */
static int l_xpcall(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  int n = lua_gettop(L);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, guarded_msgh, 1);
  int msgh = n + 1;
  lua_pushvalue(L, 1);
  for (int i = 3; i <= n; ++i) lua_pushvalue(L, i);
  int st = interruptible_pcall(L, n - 2, LUA_MULTRET, msgh);
  lua_pushboolean(L, st == 0);
  lua_replace(L, msgh);
  return lua_gettop(L) - msgh + 1;
}

static int luaopen_fhelium_lineinput(lua_State *L) {
  static const luaL_Reg fns[] = {{"readline", l_readline},       {"history_open", l_history_open},
                                 {"add_history", l_add_history}, {"set_completer", l_set_completer},
                                 {"isatty", l_isatty},           {"xpcall", l_xpcall},
                                 {NULL, NULL}};
  lua_newtable(L);
  fh__lua_setfuncs(L, fns);
  lua_pushstring(L, FH_LINE_EDITING_DESC);
  lua_setfield(L, -2, "backend");
#ifdef FH_HAVE_EDITLINE
  lua_pushboolean(L, 1);
#else
  lua_pushboolean(L, 0);
#endif
  lua_setfield(L, -2, "editing");
  return 1;
}

/* ---- errors ---------------------------------------------------------------- */
static const char *lua_dir(void);

/* The text to print for the error at index 1 (see msghandler). */
static int describe_error(lua_State *L) {
  int t = lua_type(L, 1);
  if (t == LUA_TSTRING) {
    luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
  }
  if ((t == LUA_TTABLE || t == LUA_TUSERDATA) && luaL_getmetafield(L, 1, "__tostring")) {
    lua_pushvalue(L, 1);
    if (lua_pcall(L, 1, 1, 0) != 0) {
      lua_pushfstring(L, "(error object's __tostring failed: %s)",
                      lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1));
      return 1;
    }
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pushliteral(L, "(error object's __tostring did not return a string)");
      return 1;
    }
    const char *dir = lua_dir();
    size_t dirlen = strlen(dir);
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); ++level) {
      if (!lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0) continue;
      if (ar.source[0] == '@' && strncmp(ar.source + 1, dir, dirlen) == 0) continue; /* fhelium's Lua */
      lua_pushfstring(L, "%s\n\tat %s:%d", lua_tostring(L, -1), ar.short_src, ar.currentline);
      break;
    }
    return 1;
  }
  lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  return 1;
}

/* Message handler: turns any error value into the text to print. Strings
 * get a traceback; fhelium error objects keep "<kind>: <message>" (their
 * __tostring) plus the first script line on the stack outside fhelium's own
 * Lua files; other values are described. Runs protected, so a failing
 * __tostring cannot abort. A pending Ctrl-C turns the error into
 * "interrupted!" (take_interrupt). */
static int msghandler(lua_State *L) {
  lua_settop(L, 1);
  take_interrupt(L);
  int r = describe_error(L);
  handling_error = 0;
  return r;
}

/* Prints the error text at the top of the stack (after a failed call). */
/* In a job of several ranks (fh.distributed.init under mpirun) the error
 * names the rank, and the job ends at once (MPI_Abort): the other ranks may
 * be waiting for this one in a collective and would otherwise wait forever. */
static int report(lua_State *L, int status) {
  if (status == 0) return 0;
  const char *msg = lua_tostring(L, -1);
  fflush(stdout); /* keep the order of output and error when both go to one file */
  const fh_dist_info *job = fh_dist_info_get();
  if (fh_dist_initialized() && job->world_size > 1) {
    fprintf(stderr, "fhelium: rank %d of %d (%s): %s\n", (int)job->rank, (int)job->world_size, job->host,
            msg ? msg : "(error object is not a string)");
    fprintf(stderr, "fhelium: rank %d failed: ending every rank of the job (MPI_Abort), so that none waits for it\n",
            (int)job->rank);
    fflush(stderr);
    fh_dist_abort(1);
  }
  fprintf(stderr, "fhelium: %s\n", msg ? msg : "(error object is not a string)");
  fflush(stderr);
  lua_pop(L, 1);
  return status;
}

/* Calls the function below its nargs arguments, protected, with msghandler
 * and Ctrl-C interruption. */
static int docall(lua_State *L, int nargs, int nres) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  int st = interruptible_pcall(L, nargs, nres, base);
  lua_remove(L, base);
  return st;
}

/* ---- startup --------------------------------------------------------------- */
static const char *lua_dir(void) {
  const char *env = getenv("FHELIUM_LUA_DIR");
  if (env && *env) return env;
  if (access(FH_LUA_SOURCE_DIR "/fhelium/init.lua", R_OK) == 0) return FH_LUA_SOURCE_DIR;
  return FH_LUA_INSTALL_DIR;
}

static int setup_paths(lua_State *L) {
  const char *dir = lua_dir();
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 1);
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_fhelium_core);
  lua_setfield(L, -2, "fhelium.core");
  lua_pushcfunction(L, luaopen_fhelium_lineinput);
  lua_setfield(L, -2, "fhelium.lineinput");
  lua_pop(L, 2);
  return 0;
}

static void usage(FILE *f) {
  fputs("usage: fhelium [options] [script.lua [args...]]\n"
        "  -e code     run code (may be repeated)\n"
        "  -i          enter the REPL after running the script or -e code\n"
        "  -           run stdin as a script\n"
        "  --          stop handling options\n"
        "  --version   print the version\n"
        "  --info      print build options, CUDA availability and devices\n"
        "  --help      this text\n"
        "       fhelium test [--gpu] [--verbose-skips] [busted args...]\n"
        "  run busted specs under this build (`fhelium test --help`); a script\n"
        "  named test runs as `fhelium ./test`\n"
        "With no script and no -e, the REPL starts: with line editing on a terminal,\n"
        "without prompts when stdin is piped (then the exit status is 1 if any entry\n"
        "raised an error).\n",
        f);
}

static int usage_error(lua_State *L, const char *fmt, const char *what) {
  fputs("fhelium: ", stderr);
  fprintf(stderr, fmt, what);
  fputs("\n", stderr);
  usage(stderr);
  lua_close(L);
  return 2;
}

/* require(name) leaving the module on the stack; 0 or an error status. */
static int dorequire(lua_State *L, const char *name) {
  lua_getglobal(L, "require");
  lua_pushstring(L, name);
  return docall(L, 1, 1);
}

/* require("fhelium.repl").run() -> true when every entry succeeded. */
static int run_repl(lua_State *L) {
  int st = dorequire(L, "fhelium.repl");
  if (st) return report(L, st);
  lua_getfield(L, -1, "run");
  lua_remove(L, -2);
  /* entries run protected (and interruptible) inside; this call only fails
   * on a REPL bug, and is not interruptible itself */
  lua_pushcfunction(L, msghandler);
  lua_insert(L, -2);
  st = lua_pcall(L, 0, 1, -2);
  lua_remove(L, -2);
  if (st) return report(L, st);
  int ok = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return ok ? 0 : 1;
}

static int run_info(lua_State *L) {
  int st = dorequire(L, "fhelium.info");
  if (st == 0) {
    lua_createtable(L, 0, 6);
    lua_pushstring(L, FH_LINE_EDITING_DESC);
    lua_setfield(L, -2, "line_editing");
    lua_pushstring(L, lua_dir());
    lua_setfield(L, -2, "lua_dir");
    lua_pushstring(L, FH_BUILD_C_COMPILER);
    lua_setfield(L, -2, "c_compiler");
    lua_pushstring(L, FH_BUILD_CUDA_COMPILER);
    lua_setfield(L, -2, "cuda_compiler");
    lua_pushstring(L, FH_BUILD_CUDA_ARCHS);
    lua_setfield(L, -2, "cuda_architectures");
    st = docall(L, 1, 0);
  }
  return report(L, st);
}

/* fhelium test [args]: require("fhelium.test_command").main({args...}),
 * whose result is the exit status. */
static int run_test(lua_State *L, int argc, char **argv) {
  int st = dorequire(L, "fhelium.test_command");
  if (st) return report(L, st) ? 1 : 0;
  lua_getfield(L, -1, "main");
  lua_remove(L, -2);
  lua_createtable(L, argc, 0);
  for (int k = 0; k < argc; ++k) {
    lua_pushstring(L, argv[k]);
    lua_rawseti(L, -2, k + 1);
  }
  st = docall(L, 1, 1);
  if (st) return report(L, st) ? 1 : 0;
  int code = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : 1;
  lua_pop(L, 1);
  return code;
}

/* os.exit([code [, close]]): LuaJIT's, except that the Lua state is closed
 * first unless `close` is false. Every finalizer then runs while the CUDA
 * runtime is still alive: captured programs, buffers, copy handles and
 * tensors are released in order (their pending work waited for by the engine's
 * own rules) instead of being dropped with the process, and LeakSanitizer sees
 * no engine object that only the Lua heap (which it does not scan) refers to.
 * os.exit(code, false) exits at once, as plain LuaJIT's os.exit(code) does. */
static int l_os_exit(lua_State *L) {
  int status = EXIT_SUCCESS;
  if (lua_isboolean(L, 1)) status = lua_toboolean(L, 1) ? EXIT_SUCCESS : EXIT_FAILURE;
  else if (!lua_isnoneornil(L, 1)) status = (int)luaL_checkinteger(L, 1);
  int close = lua_isnoneornil(L, 2) || lua_toboolean(L, 2);
  fflush(stdout);
  if (close) lua_close(L);
  exit(status);
  return 0;
}

static void install_os_exit(lua_State *L) {
  lua_getglobal(L, "os");
  lua_pushcfunction(L, l_os_exit);
  lua_setfield(L, -2, "exit");
  lua_pop(L, 1);
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    fputs("fhelium: cannot create a Lua state (out of memory)\n", stderr);
    return 1;
  }
  lua_gc(L, LUA_GCSTOP, 0);
  luaL_openlibs(L);
  install_os_exit(L);
  lua_gc(L, LUA_GCRESTART, -1);
  luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_ON);
  setup_paths(L);

  if (argc >= 2 && strcmp(argv[1], "test") == 0) {
    int code = run_test(L, argc - 2, argv + 2);
    fflush(stdout);
    lua_close(L);
    return code;
  }

  int interactive = 0, ran = 0, i;
  for (i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      ++i;
      break;
    } else if (strcmp(a, "--version") == 0 || strcmp(a, "-v") == 0) {
      printf("fhelium %s (%s)\n", fh_version(), LUAJIT_VERSION);
      lua_close(L);
      return 0;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      lua_close(L);
      return 0;
    } else if (strcmp(a, "--info") == 0) {
      int st = run_info(L);
      lua_close(L);
      return st ? 1 : 0;
    } else if (strcmp(a, "-i") == 0) {
      interactive = 1;
    } else if (strncmp(a, "-e", 2) == 0) {
      const char *code = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
      if (code == NULL) return usage_error(L, "%s needs an argument", "-e");
      int st = luaL_loadbuffer(L, code, strlen(code), "=(command line)");
      if (st == 0) st = docall(L, 0, 0);
      ran = 1;
      if (report(L, st)) {
        lua_close(L);
        return 1;
      }
    } else if (a[0] == '-' && a[1] != '\0') {
      return usage_error(L, "unknown option '%s'", a);
    } else {
      break; /* the script */
    }
  }
  if (i < argc) {
    /* arg: arg[0] = script, arg[1..] = its arguments, arg[-k] = before it */
    lua_createtable(L, argc - i - 1, i + 1);
    for (int k = 0; k < argc; ++k) {
      lua_pushstring(L, argv[k]);
      lua_rawseti(L, -2, k - i);
    }
    lua_setglobal(L, "arg");
    const char *script = strcmp(argv[i], "-") == 0 ? NULL : argv[i];
    int st = luaL_loadfile(L, script);
    if (st == 0) {
      int nargs = argc - i - 1;
      luaL_checkstack(L, nargs, "too many arguments");
      for (int k = i + 1; k < argc; ++k) lua_pushstring(L, argv[k]);
      st = docall(L, nargs, 0);
    }
    ran = 1;
    if (report(L, st)) {
      lua_close(L);
      return 1;
    }
  }
  int st = 0;
  if (interactive || !ran) st = run_repl(L);
  fflush(stdout);
  lua_close(L);
  return st ? 1 : 0;
}

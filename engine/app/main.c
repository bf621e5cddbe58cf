/* The `fhelium` executable: LuaJIT with fhelium preloaded.
 *   fhelium script.lua [args]   run a script (global `arg` as in luajit)
 *   fhelium -e 'code'           run a chunk (may be repeated)
 *   fhelium -i                  start the REPL (also: no arguments on a terminal)
 *   fhelium --version | --info
 * With stdin not a terminal and no arguments, the REPL reads stdin (so it
 * can be driven through a pipe). The Lua side lives in lua/fhelium; its
 * directory is found from FHELIUM_LUA_DIR, else the source tree, else the
 * install prefix. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>

#include "binding.h"

#ifdef FH_HAVE_EDITLINE
#include <editline/readline.h>
#endif

#ifndef FH_LINE_EDITING_DESC
#define FH_LINE_EDITING_DESC "none"
#endif

/* ---- line input for the REPL ------------------------------------------- */
static lua_State *completion_L;
static int completer_ref = LUA_NOREF;

#ifdef FH_HAVE_EDITLINE
static char **complete_cb(const char *text, int start, int end) {
  (void)start;
  (void)end;
  rl_attempted_completion_over = 1;
  lua_State *L = completion_L;
  if (L == NULL || completer_ref == LUA_NOREF) return NULL;
  lua_rawgeti(L, LUA_REGISTRYINDEX, completer_ref);
  lua_pushstring(L, text);
  lua_pushstring(L, rl_line_buffer ? rl_line_buffer : "");
  if (lua_pcall(L, 2, 1, 0) != 0 || !lua_istable(L, -1)) {
    lua_pop(L, 1);
    return NULL;
  }
  int n = (int)lua_objlen(L, -1);
  if (n == 0) {
    lua_pop(L, 1);
    return NULL;
  }
  char **m = calloc((size_t)n + 2, sizeof *m);
  if (m == NULL) {
    lua_pop(L, 1);
    return NULL;
  }
  /* m[0] is the longest common prefix, as readline expects */
  for (int i = 0; i < n; ++i) {
    lua_rawgeti(L, -1, i + 1);
    m[i + 1] = strdup(lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
    lua_pop(L, 1);
  }
  size_t lcp = strlen(m[1]);
  for (int i = 2; i <= n; ++i) {
    size_t j = 0;
    while (j < lcp && m[i][j] == m[1][j]) ++j;
    lcp = j;
  }
  m[0] = strndup(m[1], lcp);
  lua_pop(L, 1);
  return m;
}
#endif

static int l_readline(lua_State *L) {
  const char *prompt = luaL_optstring(L, 1, "> ");
#ifdef FH_HAVE_EDITLINE
  if (isatty(0)) {
    completion_L = L;
    char *line = readline(prompt);
    completion_L = NULL;
    if (line == NULL) return 0;
    lua_pushstring(L, line);
    free(line);
    return 1;
  }
#endif
  if (isatty(0)) {
    fputs(prompt, stdout);
    fflush(stdout);
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int c, any = 0;
  while ((c = getchar()) != EOF && c != '\n') {
    luaL_addchar(&b, (char)c);
    any = 1;
  }
  if (c == EOF && !any) return 0;
  luaL_pushresult(&b);
  return 1;
}

static int l_add_history(lua_State *L) {
#ifdef FH_HAVE_EDITLINE
  add_history(luaL_checkstring(L, 1));
#else
  (void)L;
#endif
  return 0;
}
static int l_read_history(lua_State *L) {
#ifdef FH_HAVE_EDITLINE
  read_history(luaL_checkstring(L, 1));
#else
  (void)L;
#endif
  return 0;
}
static int l_write_history(lua_State *L) {
#ifdef FH_HAVE_EDITLINE
  write_history(luaL_checkstring(L, 1));
#else
  (void)L;
#endif
  return 0;
}
static int l_set_completer(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  if (completer_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, completer_ref);
  lua_pushvalue(L, 1);
  completer_ref = luaL_ref(L, LUA_REGISTRYINDEX);
#ifdef FH_HAVE_EDITLINE
  rl_attempted_completion_function = complete_cb;
#endif
  return 0;
}
static int l_isatty(lua_State *L) {
  lua_pushboolean(L, isatty((int)luaL_optinteger(L, 1, 0)));
  return 1;
}

static int luaopen_fhelium_lineinput(lua_State *L) {
  static const luaL_Reg fns[] = {{"readline", l_readline},           {"add_history", l_add_history},
                                 {"read_history", l_read_history},   {"write_history", l_write_history},
                                 {"set_completer", l_set_completer}, {"isatty", l_isatty},
                                 {NULL, NULL}};
  lua_newtable(L);
  fh__lua_setfuncs(L, fns);
  lua_pushstring(L, FH_LINE_EDITING_DESC);
  lua_setfield(L, -2, "backend");
  return 1;
}

/* ---- startup -------------------------------------------------------------- */
static int traceback(lua_State *L) {
  /* error objects (tables) keep their identity; strings get a traceback */
  if (lua_type(L, 1) == LUA_TSTRING) {
    luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
  }
  return 1;
}

static int report(lua_State *L, int status) {
  if (status == 0) return 0;
  const char *msg;
  if (lua_type(L, -1) == LUA_TTABLE && luaL_callmeta(L, -1, "__tostring")) msg = lua_tostring(L, -1);
  else msg = lua_tostring(L, -1);
  fprintf(stderr, "fhelium: %s\n", msg ? msg : "(error object is not a string)");
  fflush(stderr);
  return status;
}

static int docall(lua_State *L, int nargs, int nres) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, traceback);
  lua_insert(L, base);
  int st = lua_pcall(L, nargs, nres, base);
  lua_remove(L, base);
  return st;
}

static const char *lua_dir(void) {
  const char *env = getenv("FHELIUM_LUA_DIR");
  if (env && *env) return env;
  if (access(FH_LUA_SOURCE_DIR "/fhelium/init.lua", R_OK) == 0) return FH_LUA_SOURCE_DIR;
  return FH_LUA_INSTALL_DIR;
}

static void setup_paths(lua_State *L) {
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
}

static void usage(FILE *f) {
  fputs("usage: fhelium [options] [script.lua [args...]]\n"
        "  -e code     run code (may be repeated)\n"
        "  -i          enter the REPL after running the script or -e code\n"
        "  -           run stdin as a script\n"
        "  --version   print the version\n"
        "  --info      print build options, CUDA availability and devices\n"
        "  --help      this text\n"
        "With no script on a terminal (or with -i) the REPL starts; with stdin\n"
        "piped and no script, the REPL reads the pipe.\n",
        f);
}

static int run_repl(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "fhelium.repl");
  int st = docall(L, 1, 1);
  if (st) return report(L, st);
  lua_getfield(L, -1, "run");
  lua_remove(L, -2);
  return report(L, docall(L, 0, 0));
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    fputs("fhelium: cannot create a Lua state\n", stderr);
    return 1;
  }
  luaL_openlibs(L);
  luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_ON);
  setup_paths(L);

  int interactive = 0, ran = 0, i, status = 0;
  for (i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (strcmp(a, "--version") == 0) {
      printf("fhelium %s (%s)\n", fh_version(), LUAJIT_VERSION);
      lua_close(L);
      return 0;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      lua_close(L);
      return 0;
    } else if (strcmp(a, "--info") == 0) {
      lua_getglobal(L, "require");
      lua_pushliteral(L, "fhelium.info");
      status = docall(L, 1, 1);
      if (status == 0) {
        lua_pushstring(L, FH_LINE_EDITING_DESC);
        status = docall(L, 1, 0);
      }
      report(L, status);
      lua_close(L);
      return status ? 1 : 0;
    } else if (strcmp(a, "-i") == 0) {
      interactive = 1;
    } else if (strcmp(a, "-e") == 0) {
      if (++i >= argc) {
        fputs("fhelium: -e needs an argument\n", stderr);
        usage(stderr);
        lua_close(L);
        return 1;
      }
      status = luaL_loadbuffer(L, argv[i], strlen(argv[i]), "=(command line)");
      if (status == 0) status = docall(L, 0, 0);
      ran = 1;
      if (report(L, status)) {
        lua_close(L);
        return 1;
      }
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "fhelium: unknown option '%s'\n", a);
      usage(stderr);
      lua_close(L);
      return 1;
    } else {
      break; /* script */
    }
  }
  if (i < argc) {
    /* arg table: arg[0] = script, arg[1..] = its arguments, arg[-k] before */
    lua_createtable(L, argc - i - 1, i + 1);
    for (int k = 0; k < argc; ++k) {
      lua_pushstring(L, argv[k]);
      lua_rawseti(L, -2, k - i);
    }
    lua_setglobal(L, "arg");
    const char *script = strcmp(argv[i], "-") == 0 ? NULL : argv[i];
    status = luaL_loadfile(L, script);
    if (status == 0) {
      int nargs = argc - i - 1;
      luaL_checkstack(L, nargs, "too many arguments");
      for (int k = i + 1; k < argc; ++k) lua_pushstring(L, argv[k]);
      status = docall(L, nargs, 0);
    }
    ran = 1;
    if (report(L, status)) {
      lua_close(L);
      return 1;
    }
  }
  if (interactive || !ran) status = run_repl(L);
  lua_close(L);
  return status ? 1 : 0;
}

-- The fhelium REPL: `fhelium` with no script, or `fhelium -i`.
--
-- Each entry is compiled first as an expression list (so `1 + 2`, `t`,
-- `f(x)` print their results), then as statements; `=expr` prints too.
-- While an entry is incomplete (an open `function`, `do`, string, ...) the
-- REPL keeps reading with the ">>" prompt. Results print through
-- fhelium.pretty (tensors like Torch7, tables nested, other values through
-- __tostring). An error is shown and the session goes on: fhelium error
-- objects as "<kind>: <message>", other errors with a traceback of the
-- entry's own frames. `fh` is a global. Locals do not outlive their entry:
-- use globals across entries.
--
-- On a terminal: prompts, a banner, line editing, tab completion and a
-- history file (~/.fhelium_history, or $FHELIUM_HISTORY; "" disables it)
-- saved after every line, when built with libedit. Ctrl-C discards the line
-- being typed, or interrupts running code; Ctrl-D quits.
--
-- With stdin not a terminal (a pipe or a file): no prompts, no banner, no
-- history; results go to stdout and errors to stderr, in order, so a
-- program or a spec can drive the REPL. run() then returns false when any
-- entry failed (the executable exits 1).
local M = {}

M.prompt = "> "
M.prompt2 = ">> "
M.chunkname = "=stdin"
M.traceback_head = 10 -- frames shown before and after the gap of a deep traceback
M.traceback_tail = 11

local keywords = {
  "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in", "local", "nil",
  "not", "or", "repeat", "return", "then", "true", "until", "while",
}

local function pack(...) return { n = select("#", ...), ... } end

-- The directory holding fhelium's own Lua files (frames there are library
-- internals, not the user's code).
local libdir = (debug.getinfo(1, "S").source:match("^@(.*)fhelium[/\\]repl%.lua$"))

-- ---- compiling -------------------------------------------------------------

--- Compile one entry. Returns a function and a kind ("expr": it returns a
--- pack {n=, ...} of the values to print; "stmt": it returns the chunk's own
--- results), or nil, the syntax error and whether the entry is merely
--- incomplete (more lines may complete it).
function M.compile(chunk, chunkname)
  chunkname = chunkname or M.chunkname
  local src, expr_only = chunk, false
  local rest = chunk:match("^%s*=(.*)$")
  if rest then src, expr_only = rest, true end
  -- The values are packed by a call around the expression, never returned
  -- directly: `return error("x")` would be a tail call and lose the entry's
  -- position in the message. Everything stays on the entry's line 1.
  local fn = loadstring("local __fh_pack = ... return __fh_pack(" .. src .. "\n)", chunkname)
  if fn then
    return function() return fn(pack) end, "expr"
  end
  local err
  -- "=expr" reports the errors of "return expr"; other entries are tried
  -- as statements
  fn, err = loadstring(expr_only and ("return " .. src) or src, chunkname)
  if fn then return fn, "stmt" end
  -- incomplete: the error is at the end of the input, except a short string
  -- left open (it cannot continue on the next line)
  local incomplete = err:find("'<eof>'$") ~= nil and not err:find("unfinished string", 1, true)
  return nil, err, incomplete
end

-- ---- showing values and errors -----------------------------------------------

--- The text the REPL prints for one value.
function M.format(v)
  local ok, s = pcall(function() return require("fhelium.pretty").value(v) end)
  if ok and type(s) == "string" then return s end
  local ok2, s2 = pcall(tostring, v)
  return ("%s (printing failed: %s)"):format(ok2 and s2 or type(v), tostring(s))
end

local function frame_text(info)
  local where
  if info.what == "C" then
    where = "[C]:"
  else
    where = info.short_src .. ":" .. (info.currentline > 0 and (info.currentline .. ":") or "")
  end
  local what
  if info.what == "main" then
    what = "in main chunk"
  elseif info.name and info.namewhat ~= "" then
    what = ("in function '%s'"):format(info.name)
  elseif info.what == "C" then
    what = "?"
  else
    what = ("in function <%s:%d>"):format(info.short_src, info.linedefined)
  end
  return "\t" .. where .. " " .. what
end

local function is_fherror(e)
  local ok, errors = pcall(require, "fhelium.errors")
  return ok and errors.is_error(e)
end

-- Number of stack frames from the caller of this function to the bottom.
local function depth()
  local n = 1
  while debug.getinfo(n + 1, "f") do n = n + 1 end
  return n - 1
end

--- A message handler for an xpcall made by a function `below` frames deep
--- (what depth() said in it). It keeps only the frames above that xpcall:
--- the entry and what it called (tail calls, which replace their caller's
--- frame, change nothing). `between` (default 0) is the number of frames
--- between the handler and the frame that raised: 1 under
--- fhelium.lineinput's xpcall, which calls the handler through a C frame.
--- Returns the text to show.
function M.error_handler(below, between)
  local first = 2 + (between or 0)
  return function(e)
    -- levels: 1 this handler, then `between` frames, first .. last the
    -- entry's frames, then the xpcall, then the `below` frames of its caller
    local frames = {}
    local last = depth() - below - 1
    for level = first, last do
      local info = debug.getinfo(level, "Sln")
      if info == nil then break end
      frames[#frames + 1] = info
    end
    if is_fherror(e) then
      local text = tostring(e)
      -- where the user's code raised it: the first Lua line outside
      -- fhelium's own files (nothing more when that is the entry itself)
      for _, info in ipairs(frames) do
        if info.currentline > 0 and not (libdir and info.source:sub(1, #libdir + 1) == "@" .. libdir) then
          if info.source ~= M.chunkname then text = text .. ("\n\tat %s:%d"):format(info.short_src, info.currentline) end
          break
        end
      end
      return text
    end
    local msg
    if type(e) == "string" then
      msg = e
    elseif type(e) == "number" then
      msg = tostring(e)
    else
      local mt = debug.getmetatable(e)
      if type(mt) == "table" and rawget(mt, "__tostring") then
        local ok, s = pcall(tostring, e)
        msg = ok and tostring(s) or ("(error object's __tostring failed: " .. tostring(s) .. ")")
      else
        msg = "(error object is a " .. type(e) .. " value) " .. M.format(e)
      end
    end
    local lines = { msg, "stack traceback:" }
    local n = #frames
    for i, info in ipairs(frames) do
      if n <= M.traceback_head + M.traceback_tail or i <= M.traceback_head or i > n - M.traceback_tail then
        lines[#lines + 1] = frame_text(info)
      elseif i == M.traceback_head + 1 then
        lines[#lines + 1] = ("\t... (%d frames skipped)"):format(n - M.traceback_head - M.traceback_tail)
      end
    end
    return table.concat(lines, "\n")
  end
end

-- ---- evaluating -------------------------------------------------------------

local function default_io()
  return {
    out = function(s)
      io.stdout:write(s, "\n")
      io.stdout:flush()
    end,
    err = function(s)
      io.stdout:flush()
      io.stderr:write(s, "\n")
      io.stderr:flush()
    end,
  }
end

--- Run a compiled entry (from M.compile) and show its results or its error
--- through `out` and `err` (functions taking a line of text). Returns true,
--- or false and the error text.
function M.execute(fn, kind, out, err)
  local xpcall_, between = xpcall, 0
  local ok_li, li = pcall(require, "fhelium.lineinput")
  if ok_li then xpcall_, between = li.xpcall, 1 end -- Ctrl-C interrupts the entry, not the REPL
  local res = pack(xpcall_(fn, M.error_handler(depth(), between)))
  if not res[1] then
    err(tostring(res[2]))
    return false, res[2]
  end
  local values
  if kind == "expr" then values = res[2] else values = pack(unpack(res, 2, res.n)) end
  for i = 1, values.n do out(M.format(values[i])) end
  return true
end

--- Evaluate one entry (a string) as the REPL does; `out`/`err` default to
--- stdout/stderr. Returns true, or false and the error text (an incomplete
--- entry is a syntax error here).
function M.eval(chunk, out, err)
  local d = default_io()
  out, err = out or d.out, err or d.err
  local fn, kind = M.compile(chunk)
  if not fn then
    err(kind)
    return false, kind
  end
  return M.execute(fn, kind, out, err)
end

-- ---- completion ----------------------------------------------------------------

local function is_identifier(s) return type(s) == "string" and s:match("^[%a_][%w_]*$") ~= nil end

-- Names visible on `v` without running a metamethod: its raw fields (a
-- table), then its metatable's `fields` (names of computed fields),
-- `methods` table and `__index` table chain.
local function collect(v, names, depth)
  if depth > 8 then return end
  if type(v) == "table" then
    for k, x in next, v do
      if is_identifier(k) and names[k] == nil then names[k] = x end
    end
  end
  local mt = debug.getmetatable(v)
  if type(mt) ~= "table" then return end
  local fields = rawget(mt, "fields")
  if type(fields) == "table" then
    for k, x in next, fields do
      local name = type(k) == "number" and x or k
      if is_identifier(name) and names[name] == nil then names[name] = true end
    end
  end
  local methods = rawget(mt, "methods")
  if type(methods) == "table" then collect(methods, names, depth + 1) end
  local index = rawget(mt, "__index")
  if type(index) == "table" then collect(index, names, depth + 1) end
end

-- v[k] without running a metamethod (nil when only a metamethod knows).
local function lookup(v, k, depth)
  depth = depth or 0
  if depth > 8 then return nil end
  if type(v) == "table" then
    local r = rawget(v, k)
    if r ~= nil then return r end
  end
  local mt = debug.getmetatable(v)
  if type(mt) ~= "table" then return nil end
  local methods = rawget(mt, "methods")
  if type(methods) == "table" then
    local r = lookup(methods, k, depth + 1)
    if r ~= nil then return r end
  end
  local index = rawget(mt, "__index")
  if type(index) == "table" then return lookup(index, k, depth + 1) end
  return nil
end

-- "a.b[1]['c']" -> {"a", "b", 1, "c"}, or nil when not such a path.
local function parse_path(path)
  local first = path:match("^[%a_][%w_]*")
  if not first then return nil end
  local segs, pos = { first }, #first + 1
  while pos <= #path do
    local id = path:match("^%.([%a_][%w_]*)", pos)
    if id then
      segs[#segs + 1], pos = id, pos + 1 + #id
    else
      local num = path:match("^%[(%-?%d+)%]", pos)
      if num then
        segs[#segs + 1], pos = tonumber(num), pos + #num + 2
      else
        local q, s = path:match("^%[([\"'])([^\"'\\]-)%1%]", pos)
        if not q then return nil end
        segs[#segs + 1], pos = s, pos + #s + 4
      end
    end
  end
  return segs
end

--- Completions of `text` (the word before the cursor, e.g. "fh.ze" or
--- "t:vi"): a sorted list of full replacements. Globals and keywords for a
--- bare name; fields and methods after "."; methods (functions) after ":".
--- Names starting with "_" are offered only once "_" is typed. Never runs a
--- metamethod or any other code of the values it looks at.
function M.complete(text, line)
  if type(text) ~= "string" or text == "" then return {} end
  local wstart = text:find("[%a_][%w_]*$") or (#text + 1)
  local word, head = text:sub(wstart), text:sub(1, wstart - 1)
  local names = {}
  local methods_only = false
  if head == "" then
    collect(_G, names, 0)
    for _, k in ipairs(keywords) do names[k] = names[k] or true end
  else
    local sep = head:sub(-1)
    if sep ~= "." and sep ~= ":" then return {} end
    local segs = parse_path(head:sub(1, -2))
    if not segs then return {} end
    local v = _G
    for _, k in ipairs(segs) do
      v = lookup(v, k)
      if v == nil then return {} end
    end
    collect(v, names, 0)
    methods_only = sep == ":"
  end
  local r = {}
  local hidden = word:sub(1, 1) ~= "_"
  for k, x in pairs(names) do
    if k:sub(1, #word) == word and not (hidden and k:sub(1, 1) == "_") and
      not (methods_only and type(x) ~= "function") then
      r[#r + 1] = head .. k
    end
  end
  table.sort(r)
  return r
end

-- ---- the loop -------------------------------------------------------------------

local function history_path()
  local p = os.getenv("FHELIUM_HISTORY")
  if p then return p ~= "" and p or nil end
  local home = os.getenv("HOME")
  return home and home ~= "" and (home .. "/.fhelium_history") or nil
end

local function banner(fh, li)
  local info = fh.info()
  local cuda
  if info.cuda_available then
    cuda = ("CUDA: %d device%s"):format(info.device_count, info.device_count == 1 and "" or "s")
  elseif info.built_with_cuda then
    cuda = "CUDA: none available"
  else
    cuda = "CPU-only build"
  end
  io.stdout:write(("fhelium %s (%s), %s. `fh` is loaded.\n"):format(info.version, jit and jit.version or _VERSION,
    cuda))
  io.stdout:write(("=expr prints, Ctrl-D quits%s.\n"):format(li.editing and ", Tab completes" or
    " (no line editing in this build)"))
end

--- Run the REPL on stdin until end of input. Returns true, or (stdin not a
--- terminal) false when any entry failed.
function M.run()
  local li = require "fhelium.lineinput"
  local tty = li.isatty(0)
  local io_ = default_io()
  local failures = 0

  local ok, fh = pcall(require, "fhelium")
  if ok then
    rawset(_G, "fh", fh)
  else
    io_.err("cannot load fhelium: " .. tostring(fh))
    failures = failures + 1
  end

  local save_history = false
  if tty then
    if ok then banner(fh, li) end
    local path = history_path()
    if path then save_history = li.history_open(path) end
    li.set_completer(function(text, line)
      local cok, r = pcall(M.complete, text, line)
      return cok and r or {}
    end)
  end

  local buffer, last_err
  while true do
    local line = li.readline(buffer and M.prompt2 or M.prompt)
    if line == nil then break end
    if line == false then -- Ctrl-C while typing: drop the entry
      io.stdout:write("\n")
      buffer = nil
    else
      if save_history and line:find("%S") then
        local hok, herr = li.add_history(line)
        if not hok then
          io_.err("fhelium: history not saved: " .. tostring(herr))
          save_history = false
        end
      end
      local chunk = buffer and (buffer .. "\n" .. line) or line
      if chunk:find("%S") then
        local fn, kind, incomplete = M.compile(chunk)
        if not fn and incomplete then -- keep reading
          buffer, last_err = chunk, kind
        else
          buffer = nil
          local done
          if fn then
            done = M.execute(fn, kind, io_.out, io_.err)
          else
            io_.err(kind)
          end
          if not done then failures = failures + 1 end
        end
      end
    end
  end
  if buffer then
    io_.err(last_err .. " (input ended inside an unfinished entry)")
    failures = failures + 1
  end
  if tty then
    io.stdout:write("\n")
    li.set_completer(nil)
  end
  io.stdout:flush()
  return tty or failures == 0
end

return M

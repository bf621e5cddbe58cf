-- Running the built `fhelium` executable from specs.
--   local cli = require "spec.support.cli"
--   local r = cli.run({ "-e", "print(1)" }, { stdin = "...", env = { X = "1" }, cwd = "/tmp" })
--   r.code, r.stdout, r.stderr (or, with merged = true, r.output: both in order)
--
-- The binary is $FHELIUM_BIN (set by scripts/env.sh, which scripts/test
-- sources), else $FHELIUM_BUILD/fhelium, else build/fhelium under the
-- project root, else `fhelium` on PATH. Not finding it is an error, never a
-- skip: these specs must run wherever the others do.
local M = {}

local function is_executable(path)
  return path and path ~= "" and os.execute(("test -x %s"):format(M.quote(path))) == 0
end

--- A word for sh, single-quoted.
function M.quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function project_root()
  local src = debug.getinfo(1, "S").source:match("^@(.*)$") or ""
  local dir = src:match("^(.*)/spec/support/cli%.lua$")
  if dir == nil or dir == "" then dir = "." end
  if dir:sub(1, 1) ~= "/" then
    local p = io.popen("pwd")
    local cwd = p:read("*l")
    p:close()
    dir = dir == "." and cwd or (cwd .. "/" .. dir:gsub("^%./", ""))
  end
  return dir
end

M.root = project_root()

local function find_binary()
  local tried = {}
  local function try(p)
    if p and p ~= "" then
      tried[#tried + 1] = p
      if is_executable(p) then return p end
    end
  end
  local build = os.getenv("FHELIUM_BUILD")
  if build and build ~= "" and build:sub(1, 1) ~= "/" then build = M.root .. "/" .. build end
  local found = try(os.getenv("FHELIUM_BIN")) or try(build and (build .. "/fhelium")) or try(M.root .. "/build/fhelium")
  if found then return found end
  local p = io.popen("command -v fhelium 2>/dev/null")
  local onpath = p:read("*l")
  p:close()
  found = try(onpath)
  if found then return found end
  error("cannot find the fhelium executable (tried " .. table.concat(tried, ", ") ..
    "); build it with scripts/build and set FHELIUM_BIN or source scripts/env.sh", 2)
end

M.bin = find_binary()

local function tmpname()
  local n = os.tmpname() -- creates the file
  return n
end

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

--- Write `text` to a new temporary file; returns its path.
function M.tempfile(text, suffix)
  local n = tmpname()
  local path = n .. (suffix or "")
  if suffix then os.remove(n) end
  write(path, text or "")
  return path
end

--- Run a shell command line with stdin from a string; returns
--- {code=, stdout=, stderr=}, or with opts.merged {code=, output=} (both
--- streams into one file, in the order they were written).
--- opts.env: {NAME = value | false (unset)}; opts.cwd: directory.
function M.sh(cmdline, opts)
  opts = opts or {}
  local fin, fout, ferr, fall = tmpname(), tmpname(), tmpname(), tmpname()
  write(fin, opts.stdin or "")
  -- LD_PRELOAD (the sanitizer runtime, in .ci/run) is for the spec process
  -- only: the tools run here are not instrumented (and a sanitized fhelium
  -- links its runtime itself)
  local env, set = { "-u LD_PRELOAD" }, {}
  for k, v in pairs(opts.env or {}) do -- env(1) takes every -u before the first NAME=value
    if v == false then env[#env + 1] = "-u " .. k else set[#set + 1] = k .. "=" .. M.quote(v) end
  end
  for _, a in ipairs(set) do env[#env + 1] = a end
  local prefix = (opts.cwd and ("cd " .. M.quote(opts.cwd) .. " && ") or "") .. "env " .. table.concat(env, " ") .. " "
  local redir
  if opts.merged then
    redir = (">%s 2>&1"):format(M.quote(fall))
  else
    redir = (">%s 2>%s"):format(M.quote(fout), M.quote(ferr))
  end
  local status = os.execute(("%s%s <%s %s"):format(prefix, cmdline, M.quote(fin), redir))
  -- LuaJIT's os.execute returns the wait status of sh (Lua 5.1 style)
  local code = status
  if type(status) == "number" then
    if status % 256 == 0 then code = math.floor(status / 256) else code = 128 + status % 128 end
  end
  local r = { code = code }
  if opts.merged then
    r.output = slurp(fall)
  else
    r.stdout, r.stderr = slurp(fout), slurp(ferr)
  end
  for _, f in ipairs { fin, fout, ferr, fall } do os.remove(f) end
  return r
end

--- Run fhelium with `args` (a list of strings).
function M.run(args, opts)
  local words = { M.quote(M.bin) }
  for _, a in ipairs(args or {}) do words[#words + 1] = M.quote(a) end
  return M.sh(table.concat(words, " "), opts)
end

--- Split text into lines (without the newlines).
function M.lines(s)
  local t = {}
  for l in (s .. (s:sub(-1) == "\n" and "" or "\n")):gmatch("(.-)\n") do t[#t + 1] = l end
  return t
end

return M

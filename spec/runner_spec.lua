-- The `fhelium` executable as a script runner: -e, scripts and `arg`,
-- --version, --info, usage errors, error messages and exit codes.
local fh = require "fhelium"
local cli = require "spec.support.cli"

local function script(text) return cli.tempfile(text, ".lua") end

describe("fhelium runner", function()
  it("prints its version and LuaJIT's with --version", function()
    local r = cli.run { "--version" }
    assert.equal(0, r.code)
    assert.equal(("fhelium %s (%s)\n"):format(fh.info().version, jit.version), r.stdout)
    assert.equal("", r.stderr)
  end)

  it("describes every option with --help", function()
    local r = cli.run { "--help" }
    assert.equal(0, r.code)
    for _, opt in ipairs { "-e code", "-i ", "--version", "--info", "--help", "usage: fhelium" } do
      assert.truthy(r.stdout:find(opt, 1, true), "--help does not mention " .. opt)
    end
  end)

  it("reports the build and CUDA availability with --info", function()
    local r = cli.run { "--info" }
    assert.equal(0, r.code)
    assert.equal("", r.stderr)
    local info = fh.info()
    assert.truthy(r.stdout:find("fhelium " .. info.version, 1, true))
    local backend = r.stdout:match("CUDA backend:%s*([^\n]*)")
    assert.truthy(backend, r.stdout)
    assert.equal(info.built_with_cuda, backend:find("^compiled") ~= nil, backend)
    local avail = r.stdout:match("CUDA available:%s*([^\n]*)")
    assert.truthy(avail, r.stdout)
    if fh.cuda.is_available() then
      assert.truthy(avail:find(("^yes, %d device"):format(fh.cuda.device_count())), avail)
      assert.truthy(r.stdout:find("cuda:0  ", 1, true))
    else
      assert.equal("no (" .. fh.cuda.unavailable_reason() .. ")", avail)
    end
    assert.truthy(r.stdout:find("REPL editing:%s*%S"), r.stdout)
    assert.truthy(r.stdout:find("LuaJIT:%s*" .. jit.version:gsub("%p", "%%%0")), r.stdout)
  end)

  it("runs -e chunks in order", function()
    local r = cli.run { "-e", "x = 20", "-e", "io.write(x + 1, '\\n')", "-eio.write('joined\\n')" }
    assert.equal(0, r.code)
    assert.equal("21\njoined\n", r.stdout)
    assert.equal("", r.stderr)
  end)

  it("prints the transposed uint64 view of the acceptance example", function()
    local code = 'local fh=require"fhelium"; print(fh.arange(6,{dtype="uint64"}):view({2,3}):transpose(1,2))'
    local r = cli.run { "-e", code }
    assert.equal(0, r.code)
    local t = fh.arange(6, { dtype = "uint64" }):view({ 2, 3 }):transpose(1, 2)
    assert.same({ 3, 2 }, t.shape)
    assert.same({ 1, 3 }, t:stride())
    assert.equal(tostring(t) .. "\n", r.stdout)
  end)

  it("runs a script with its arguments in `arg` and `...`", function()
    local path = script [[
local a, b = ...
print(select("#", ...), a, b)
print(#arg, arg[0], arg[1], arg[2], arg[-1] ~= nil)
local fh = require "fhelium"
print(fh.tensor({1, 2, 3}, {dtype = "int64"}):tolist()[3])
]]
    local r = cli.run { path, "one", "two words" }
    os.remove(path)
    assert.equal(0, r.code)
    assert.equal("", r.stderr)
    local lines = cli.lines(r.stdout)
    assert.equal("2\tone\ttwo words", lines[1])
    assert.equal(("2\t%s\tone\ttwo words\ttrue"):format(path), lines[2])
    assert.equal("3LL", lines[3])
  end)

  it("puts what came before the script at negative indices of `arg`", function()
    local path = script "print(arg[-3], arg[-2], arg[-1], arg[0], arg[1])"
    local r = cli.run { "-e", "x=1", path, "-e" }
    os.remove(path)
    assert.equal(0, r.code)
    assert.equal(table.concat({ cli.bin, "-e", "x=1", path, "-e" }, "\t") .. "\n", r.stdout)
  end)

  it("finds its Lua modules from any directory without LUA_PATH", function()
    local r = cli.run({ "-e", "local fh = require 'fhelium'; print(fh.zeros({2}, {dtype='int32'}):tolist()[2])" },
      { cwd = "/", env = { LUA_PATH = false, LUA_CPATH = false, FHELIUM_LUA_DIR = false } })
    assert.equal("", r.stderr)
    assert.equal(0, r.code)
    assert.equal("0\n", r.stdout)
  end)

  it("runs stdin as a script with -", function()
    local r = cli.run({ "-", "arg1" }, { stdin = "print('from stdin', ...)\n" })
    assert.equal(0, r.code)
    assert.equal("from stdin\targ1\n", r.stdout)
  end)

  it("stops reading options at --", function()
    local path = script "print(arg[1])"
    local r = cli.run { "--", path, "--version" }
    os.remove(path)
    assert.equal(0, r.code)
    assert.equal("--version\n", r.stdout)
  end)

  it("passes os.exit codes through", function()
    assert.equal(3, cli.run({ "-e", "os.exit(3)" }).code)
    assert.equal(0, cli.run({ "-e", "os.exit(true)" }).code)
  end)

  describe("usage errors", function()
    it("rejects an unknown option with exit code 2 and the usage", function()
      local r = cli.run { "--bogus" }
      assert.equal(2, r.code)
      assert.equal("", r.stdout)
      assert.truthy(r.stderr:find("^fhelium: unknown option '%-%-bogus'\n"), r.stderr)
      assert.truthy(r.stderr:find("usage: fhelium", 1, true))
    end)

    it("rejects -e without code", function()
      local r = cli.run { "-e" }
      assert.equal(2, r.code)
      assert.truthy(r.stderr:find("^fhelium: %-e needs an argument\n"), r.stderr)
    end)
  end)

  describe("errors", function()
    it("prints a string error with a traceback and exits 1", function()
      local r = cli.run { "-e", "local function f() error('boom') end f()" }
      assert.equal(1, r.code)
      assert.equal("", r.stdout)
      local lines = cli.lines(r.stderr)
      assert.equal("fhelium: (command line):1: boom", lines[1])
      assert.equal("stack traceback:", lines[2])
      assert.truthy(r.stderr:find("in function 'f'", 1, true), r.stderr)
    end)

    it("prints an fhelium error object as kind: message, where it was raised, and exits 1", function()
      local r = cli.run { "-e", "local fh = require 'fhelium'\nfh.zeros({2}, {device = 'gpu'})" }
      assert.equal(1, r.code)
      local lines = cli.lines(r.stderr)
      assert.equal([[fhelium: ValueError: fh.zeros: invalid device string 'gpu' (expected "cpu", "cuda" or "cuda:N")]],
        lines[1])
      assert.equal("\tat (command line):2", lines[2])
      assert.equal(2, #lines)
    end)

    it("names the script line of an error raised deeper in a script", function()
      local path = script [[
local fh = require "fhelium"
local function make(n)
  local t = fh.ones({2}):view({n})
  return t
end
make(3)
]]
      local r = cli.run { path }
      os.remove(path)
      assert.equal(1, r.code)
      local lines = cli.lines(r.stderr)
      assert.truthy(lines[1]:find("^fhelium: ValueError: "), r.stderr)
      assert.equal("\tat " .. path .. ":3", lines[2])
    end)

    it("prints a script's string error with its file and line", function()
      local path = script "local x = 1\nerror('bad thing ' .. x)\n"
      local r = cli.run { path, "a" }
      os.remove(path)
      assert.equal(1, r.code)
      local lines = cli.lines(r.stderr)
      assert.equal(("fhelium: %s:2: bad thing 1"):format(path), lines[1])
      assert.truthy(r.stderr:find("in main chunk", 1, true), r.stderr)
    end)

    it("stops at the first failing -e chunk", function()
      local r = cli.run { "-e", "print('first')", "-e", "error('second', 0)", "-e", "print('third')" }
      assert.equal(1, r.code)
      assert.equal("first\n", r.stdout)
      assert.truthy(r.stderr:find("^fhelium: second\nstack traceback:\n"), r.stderr)
    end)

    it("reports a syntax error in a script without running it", function()
      local path = script "print('ran')\nlocal = 1\n"
      local r = cli.run { path }
      os.remove(path)
      assert.equal(1, r.code)
      assert.equal("", r.stdout)
      assert.truthy(r.stderr:find(("^fhelium: %s:2: "):format(path:gsub("%p", "%%%0"))), r.stderr)
    end)

    it("reports a missing script", function()
      local r = cli.run { "/nonexistent/x.lua" }
      assert.equal(1, r.code)
      assert.equal("fhelium: cannot open /nonexistent/x.lua: No such file or directory\n", r.stderr)
    end)

    it("describes error values that are neither strings nor error objects", function()
      local r = cli.run { "-e", "error({code = 1})" }
      assert.equal(1, r.code)
      assert.equal("fhelium: (error object is a table value)\n", r.stderr)
      r = cli.run { "-e", "error(setmetatable({}, {__tostring = function() return 'custom' end}))" }
      assert.equal(1, r.code)
      assert.equal("fhelium: custom\n\tat (command line):1\n", r.stderr)
      r = cli.run { "-e", "error(setmetatable({}, {__tostring = function() error('oops', 0) end}))" }
      assert.equal(1, r.code)
      assert.equal("fhelium: (error object's __tostring failed: oops)\n", r.stderr)
    end)

    it("keeps stdout before the error when both go to one file", function()
      local r = cli.run({ "-e", "io.write('partial output\\n') error('late', 0)" }, { merged = true })
      assert.equal(1, r.code)
      assert.truthy(r.output:find("^partial output\nfhelium: late\nstack traceback:\n"), r.output)
    end)
  end)

  describe("Ctrl-C", function()
    -- Runs fhelium in the background with `args` (stdin from `stdin`),
    -- waits until the code has written the file $dir/ready, lets it block,
    -- sends SIGINT (twice with `second`), and returns {code=, stderr=,
    -- stdout=}. The code finds the directory in $FH_SPEC_DIR, which holds a
    -- fifo `fifo` that nobody writes: opening it blocks in C until the
    -- signal interrupts the open, and then the C call (dofile) raises its
    -- own error. A watchdog kills the process after 20 s.
    local function interrupted(args, stdin, second)
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir " .. cli.quote(dir) .. " && mkfifo " .. cli.quote(dir .. "/fifo")) == 0)
      local words = { cli.quote(cli.bin) }
      for _, a in ipairs(args) do words[#words + 1] = cli.quote(a) end
      local sh = ([[
d=%s
FH_SPEC_DIR="$d" %s <"$d/stdin" >"$d/out" 2>"$d/err" & pid=$!
( sleep 20; kill -KILL $pid ) 2>/dev/null & dog=$!
n=0; while [ ! -e "$d/ready" ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n + 1)); done
sleep 0.3
kill -INT $pid
%s
wait $pid; echo $? >"$d/status"
kill $dog 2>/dev/null
]]):format(cli.quote(dir), table.concat(words, " "), second and "sleep 0.5; kill -INT $pid 2>/dev/null" or "")
      local f = assert(io.open(dir .. "/stdin", "w"))
      f:write(stdin or "")
      f:close()
      cli.sh("sh -c " .. cli.quote(sh))
      local function slurp(name)
        local fh_ = io.open(dir .. "/" .. name)
        local s_ = fh_ and fh_:read("*a") or ""
        if fh_ then fh_:close() end
        return s_
      end
      local r = { code = tonumber(slurp("status")), stdout = slurp("out"), stderr = slurp("err") }
      os.execute("rm -rf " .. cli.quote(dir))
      return r
    end
    local block = 'local d = os.getenv("FH_SPEC_DIR") io.open(d .. "/ready", "w"):close() dofile(d .. "/fifo")'

    it("shows interrupted! when a blocked C call raises after the signal (runner)", function()
      local r = interrupted { "-e", block }
      assert.equal(1, r.code, r.stderr)
      assert.truthy(r.stderr:find("^fhelium: interrupted!\nstack traceback:\n"), r.stderr)
      assert.falsy(r.stderr:find("error in error handling", 1, true), r.stderr)
    end)

    it("shows interrupted! for a blocked C call in a script and names where it stopped", function()
      local path = script("local function wait_here()\n  " .. block .. "\nend\nwait_here()\n")
      local r = interrupted { path }
      os.remove(path)
      assert.equal(1, r.code, r.stderr)
      assert.truthy(r.stderr:find("^fhelium: interrupted!\n"), r.stderr)
      assert.truthy(r.stderr:find("in function 'wait_here'", 1, true), r.stderr)
    end)

    it("shows interrupted! in the REPL and goes on with the next entry", function()
      local r = interrupted({}, block .. "\nprint('after')\n")
      assert.equal(1, r.code, r.stderr) -- piped REPL: an entry failed
      assert.truthy(r.stderr:find("^interrupted!\nstack traceback:\n"), r.stderr)
      assert.falsy(r.stderr:find("error in error handling", 1, true), r.stderr)
      assert.equal("after\n", r.stdout)
    end)

    it("terminates a JIT-compiled loop on the second Ctrl-C", function()
      local r = interrupted({ "-e", 'io.open(os.getenv("FH_SPEC_DIR") .. "/ready", "w"):close() ' ..
        "local x = 0 while true do x = x + 1 end" }, "", true)
      -- hooks never run inside a trace: the first Ctrl-C is not seen, the
      -- second one kills the process with SIGINT (the shell reports 130)
      assert.equal(130, r.code, r.stderr)
    end)
  end)

  it("enters the REPL after -e with -i", function()
    local r = cli.run({ "-e", "x = 5", "-i" }, { stdin = "=x * 2\n" })
    assert.equal(0, r.code)
    assert.equal("10\n", r.stdout)
  end)
end)

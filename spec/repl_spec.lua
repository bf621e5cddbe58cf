-- The REPL: driven through a pipe (no prompts, results on stdout, errors on
-- stderr, exit status 1 when an entry failed), through a pseudo-terminal
-- (line editing, completion, history), and its Lua functions directly.
local fh = require "fhelium"
local cli = require "spec.support.cli"
local H = require "spec.helpers"
local repl = require "fhelium.repl"

local function session(input, opts)
  opts = opts or {}
  opts.stdin = input
  return cli.run({}, opts)
end

describe("REPL through a pipe", function()
  it("prints expression results without prompts or a banner", function()
    local r = session "1 + 2\n=10 / 4\n'text'\n=1, nil, false\n"
    assert.equal("", r.stderr)
    assert.equal(0, r.code)
    assert.equal('3\n2.5\n"text"\n1\nnil\nfalse\n', r.stdout)
  end)

  it("prints nothing for statements and calls without results", function()
    local r = session "x = 5\nlocal y = 2\nprint('printed')\ny\nx\n"
    assert.equal(0, r.code)
    -- locals end with their entry; globals persist
    assert.equal("printed\nnil\n5\n", r.stdout)
  end)

  it("continues incomplete entries across lines", function()
    local r = session [[
function square(x)
  return x * x
end
=square(7)
for i = 1, 3 do
  io.write(i, ";")
end
t = {
  a = 1,
}
s = [==[first
second]==]
=t.a, s
]]
    assert.equal("", r.stderr)
    assert.equal(0, r.code)
    assert.equal('49\n1;2;3;1\n"first\\\nsecond"\n', r.stdout)
  end)

  it("prints tables nested and tensors like tostring", function()
    local r = session "{1, 2, {a = 3, b = {true}}}\nfh.tensor({{1, 2}, {3, 4}}, {dtype = 'int32'})\n"
    assert.equal("", r.stderr)
    local t = fh.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "int32" })
    assert.equal("{1, 2, {a = 3, b = {true}}}\n" .. tostring(t) .. "\n", r.stdout)
  end)

  it("has fh loaded as a global", function()
    local r = session "=type(fh), fh == require 'fhelium'\nfh.arange(4, {dtype = 'uint64'}):tolist()[4]\n"
    assert.equal("", r.stderr)
    assert.equal('"table"\ntrue\n3ULL\n', r.stdout)
  end)

  it("shows an error and goes on with the next line", function()
    local r = session "error('boom')\n=1 + 1\n"
    assert.equal(1, r.code)
    assert.equal("2\n", r.stdout)
    local lines = cli.lines(r.stderr)
    assert.equal("stdin:1: boom", lines[1])
    assert.equal("stack traceback:", lines[2])
    assert.equal("\t[C]: in function 'error'", lines[3])
    assert.equal("\tstdin:1: in main chunk", lines[4])
    assert.equal(4, #lines) -- nothing of the REPL's own frames
  end)

  it("shows fhelium error objects as kind: message", function()
    local r = session "fh.zeros({2}, {device = 'gpu'})\n=3\n"
    assert.equal(1, r.code)
    assert.equal("3\n", r.stdout)
    assert.equal([[ValueError: fh.zeros: invalid device string 'gpu' (expected "cpu", "cuda" or "cuda:N")]] .. "\n",
      r.stderr)
  end)

  it("reports syntax errors and goes on", function()
    local r = session "x = = 1\n=4\n"
    assert.equal(1, r.code)
    assert.equal("4\n", r.stdout)
    assert.equal("stdin:1: unexpected symbol near '='\n", r.stderr)
  end)

  it("reports input that ends inside an unfinished entry", function()
    local r = session "=5\nfunction f()\n  return 1\n"
    assert.equal(1, r.code)
    assert.equal("5\n", r.stdout)
    assert.truthy(r.stderr:find("'end' expected", 1, true), r.stderr)
    assert.truthy(r.stderr:find("(input ended inside an unfinished entry)", 1, true), r.stderr)
  end)

  it("keeps results and errors in order when both go to one file", function()
    local r = session("=1\nerror('two', 0)\n=3\n", { merged = true })
    assert.equal(1, r.code)
    assert.equal("1\ntwo\nstack traceback:\n\t[C]: in function 'error'\n\tstdin:1: in main chunk\n3\n", r.output)
  end)

  it("exits 0 on empty input", function()
    local r = session ""
    assert.equal(0, r.code)
    assert.equal("", r.stdout)
    assert.equal("", r.stderr)
  end)
end)

describe("REPL printing of execution objects, pipelines and traces", function()
  it("prints each in one line: device, pending work, stats", function()
    local r = session [[
x = fh.arange(4, {dtype = 'float64'})
buf = fh.execution.ReusableValueBuffer.like({x})
buf
buf:copy_from({x})
p = fh.execution.HostGraphProgram.capture(function(a) return a * 2 end, {example_inputs = {x}, warmup = 0})
p
pipe = fh.pipeline(function(a) return a + 1 end, {example_inputs = {x}, slots = 2})
pipe:push({x})
pipe
fh.trace.start()
_ = pipe:push({x})
fh.trace.stop()
]]
    assert.equal("", r.stderr)
    assert.equal(0, r.code)
    local lines = {}
    for l in r.stdout:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.equal(6, #lines, r.stdout)
    assert.equal("ReusableValueBuffer(device=cpu, leaves=1, nbytes=32 (32 B))", lines[1])
    assert.equal("CopyHandle(device=cpu, bytes_copied=32 (32 B), complete)", lines[2])
    assert.matches("^HostGraphProgram%(id=%d+, device=cpu, nodes=1, replays=1, inputs 32 B%)$", lines[3])
    assert.equal("fhelium.PipelineRequest(1 on cpu, slot 1, compute stream 1, complete)", lines[4])
    assert.equal("fhelium.Pipeline(device=cpu, 2 slots of HostGraphProgram, 1 compute stream, 1 requests)", lines[5])
    assert.matches("^fhelium%.Trace%(1 tracks, 3 events: 2 copies %(64 B%), 1 replays, 0 launch groups, 0 syncs, "
      .. "0 waits; [%d.]+ [mu]?s%)$", lines[6])
  end)

  it("completes a pipeline's methods and fields", function()
    local x = fh.arange(4, { dtype = "float64" })
    _G.__fh_pipe = fh.pipeline(function(a) return a + 1 end, { example_inputs = { x } })
    assert.same({ "__fh_pipe:push" }, repl.complete("__fh_pipe:pu"))
    assert.same({ "__fh_pipe.stats" }, repl.complete("__fh_pipe.stat"))
    _G.__fh_pipe:close()
    _G.__fh_pipe = nil
  end)
end)

describe("REPL on a terminal", function()
  -- `script` (util-linux) gives the REPL a pseudo-terminal; the input is
  -- typed ahead into it, and script sends Ctrl-D when the input ends.
  local have_script = os.execute("command -v script >/dev/null 2>&1") == 0 and
    cli.sh("script -qec true /dev/null").code == 0
  -- fhelium.lineinput lives in the executable: ask it
  local editing = cli.run({ "-e", "io.write(tostring(require('fhelium.lineinput').editing))" }).stdout == "true"
  local tty_it = have_script and it or
    function(name) return H.skip_it(name, "no working `script` command for a pseudo-terminal") end
  local edit_it = tty_it
  if have_script and not editing then edit_it = function(name) return H.skip_it(name, "built without libedit") end end

  local function typed(input, hist)
    local r = cli.sh(("script -qec %s /dev/null"):format(cli.quote(cli.quote(cli.bin))), {
      stdin = input, env = { FHELIUM_HISTORY = hist or "" },
    })
    r.stdout = r.stdout:gsub("\r", "")
    return r
  end

  tty_it("shows a banner and prompts, and errors do not end the session", function()
    local r = typed "x = 41\n=x + 1\nfor i = 1, 2 do\nio.write(i, ' ')\nend\nerror('boom')\n=x\n"
    assert.equal(0, r.code) -- errors in an interactive session do not set the exit status
    -- the banner, then prompts and results in order (where the typed-ahead
    -- input shows up depends on the line editing, so only order is checked)
    local out = r.stdout
    local pos = out:find("`fh` is loaded", 1, true)
    assert.truthy(pos, out)
    for _, want in ipairs { "> ", "42\n", ">> ", "1 2 ", "stdin:1: boom\n", "> ", "41\n" } do
      local at = out:find(want, pos, true)
      assert.truthy(at, ("%q not found in order in:\n%s"):format(want, out))
      pos = at + #want
    end
  end)

  tty_it("prints the banner and the transcript README.md shows", function()
    local f = assert(io.open(cli.root .. "/README.md"))
    local readme = f:read("*a")
    f:close()
    local transcript = readme:match("### The REPL\n\n```\n%$ fhelium\n(.-)```\n")
    assert.truthy(transcript, "README.md: no REPL transcript under ### The REPL")
    local lines = cli.lines(transcript)
    -- the entries typed in the transcript, replayed on a terminal
    local input = {}
    for _, l in ipairs(lines) do
      local entry = l:match("^>>? (.*)$")
      if entry then input[#input + 1] = entry end
    end
    local r = typed(table.concat(input, "\n") .. "\n")
    assert.equal(0, r.code)
    local out = cli.lines(r.stdout)
    -- the banner: the README's must be the REPL's, except the build form
    -- (CUDA: N devices / CUDA: none available / CPU-only build), which the
    -- README explains
    local function general(b)
      return (b:gsub(", CUDA: %d+ devices?%. ", ", <build>. "):gsub(", CUDA: none available%. ", ", <build>. ")
        :gsub(", CPU%-only build%. ", ", <build>. "))
    end
    -- (typed-ahead input may be echoed before it: find the banner's lines)
    local b1, b2
    for i, l in ipairs(out) do
      if l:find("`fh` is loaded.", 1, true) then
        b1, b2 = l:match("(fhelium .*)$"), out[i + 1]
        break
      end
    end
    assert.truthy(b1, r.stdout)
    assert.equal(general(b1), general(lines[1]))
    assert.truthy(lines[1]:find(", CUDA: %d+ devices?%. ") or lines[1]:find(", CUDA: none available%. ") or
      lines[1]:find(", CPU%-only build%. "), lines[1])
    for _, form in ipairs { "`CUDA: N devices`", "`CUDA: none\n  available`", "`CPU-only build`" } do
      assert.truthy(readme:find(form, 1, true), "README.md does not explain the banner form " .. form)
    end
    if editing then assert.equal(b2, lines[2]) end
    -- the results after each entry are the REPL's
    local results = {}
    for _, l in ipairs(lines) do
      if not l:find("^>") and l ~= lines[1] and l ~= lines[2] then results[#results + 1] = l end
    end
    local text = r.stdout
    local pos = 1
    for _, want in ipairs(results) do
      local at = text:find(want, pos, true)
      assert.truthy(at, ("README transcript line %q not printed (in order) by the REPL:\n%s"):format(want, text))
      pos = at + #want
    end
  end)

  edit_it("completes names with Tab and saves the history after every line", function()
    local hist = os.tmpname()
    os.remove(hist)
    local r = typed("x = 41\n=fh.cuda.is_avail\t()\nerror('boom')\n   \n", hist)
    assert.equal(0, r.code)
    assert.truthy(r.stdout:find("able()\n" .. tostring(fh.cuda.is_available()) .. "\n", 1, true), r.stdout)
    local f = assert(io.open(hist))
    local saved = f:read("*a")
    f:close()
    os.remove(hist)
    -- libedit's format: a header, then one line per entry, spaces as \040;
    -- the completed text is saved, blank lines are not
    assert.equal("_HiStOrY_V2_\nx\\040=\\04041\n=fh.cuda.is_available()\nerror('boom')\n", saved)
  end)
end)

describe("repl.compile", function()
  it("compiles expressions to return their values packed", function()
    local fn, kind = repl.compile("1 + 1, 'a'")
    assert.equal("expr", kind)
    local v = fn()
    assert.same({ n = 2, 2, "a" }, v)
  end)

  it("compiles statements when the entry is not an expression", function()
    local fn, kind = repl.compile("local a = 1; return a + 1")
    assert.equal("stmt", kind)
    assert.equal(2, fn())
  end)

  it("tells incomplete entries from wrong ones", function()
    for _, src in ipairs { "for i = 1, 2 do", "function f()", "x = ", "s = [[abc", "=1 +", "t = {", "--[[ note" } do
      local fn, err, incomplete = repl.compile(src)
      assert.is_nil(fn, src)
      assert.is_true(incomplete, src .. ": " .. tostring(err))
    end
    for _, src in ipairs { "x = = 1", "end", "=for", "1 +* 2", "s = 'abc" } do
      local fn, err, incomplete = repl.compile(src)
      assert.is_nil(fn, src)
      assert.is_false(incomplete, src .. ": " .. tostring(err))
      assert.equal("string", type(err))
    end
  end)
end)

describe("repl.eval", function()
  local function eval(src)
    local out, err = {}, {}
    local ok = repl.eval(src, function(s) out[#out + 1] = s end, function(s) err[#err + 1] = s end)
    return ok, table.concat(out, "\n"), table.concat(err, "\n")
  end

  it("keeps the entry's position in errors raised by a returned call", function()
    local ok, out, err = eval("error('at the entry')")
    assert.is_false(ok)
    assert.equal("", out)
    assert.truthy(err:find("^stdin:1: at the entry\n"), err)
  end)

  it("names the line of user code outside the entry for fhelium errors", function()
    local f = loadstring("local fh = require 'fhelium'\nreturn function() local t = fh.zeros({2}, {dtype = 'float16'}) return t end",
      "=user.lua")()
    rawset(_G, "__repl_spec_f", f)
    local ok, _, err = eval("__repl_spec_f()")
    rawset(_G, "__repl_spec_f", nil)
    assert.is_false(ok)
    assert.truthy(err:find("^ValueError: "), err)
    assert.truthy(err:find("\n\tat user.lua:2$"), err)
  end)

  it("abbreviates deep tracebacks", function()
    local ok, _, err = eval("local function r(n) if n == 0 then error('deep') end return 1 + r(n - 1) end r(100)")
    assert.is_false(ok)
    local lines = cli.lines(err)
    assert.equal("stdin:1: deep", lines[1])
    assert.equal("\t... (82 frames skipped)", lines[2 + 1 + repl.traceback_head])
    -- error, 101 calls of r, the entry: 103 frames, 10 + 11 shown
    assert.equal(2 + repl.traceback_head + 1 + repl.traceback_tail, #lines)
    assert.equal("\tstdin:1: in main chunk", lines[#lines])
  end)

  it("survives a stack overflow", function()
    local ok, _, err = eval("local function r() return 1 + r() end return r()")
    assert.is_false(ok)
    assert.truthy(err:find("stack overflow", 1, true), err)
    local ok2, out = eval("=1")
    assert.is_true(ok2)
    assert.equal("1", out)
  end)

  it("survives values whose printing fails", function()
    local ok, out = eval("setmetatable({}, {__tostring = function() error('no print', 0) end})")
    assert.is_true(ok)
    assert.truthy(out:find("printing failed: no print", 1, true), out)
  end)

  it("describes odd error values", function()
    local ok, _, err = eval("error({code = 7})")
    assert.is_false(ok)
    assert.truthy(err:find("^%(error object is a table value%) {code = 7}\n"), err)
  end)
end)

describe("repl.complete", function()
  local saved = {}
  local function global(name, v)
    saved[#saved + 1] = name
    rawset(_G, name, v)
  end
  before_each(function() global("fh", fh) end)
  after_each(function()
    for _, k in ipairs(saved) do rawset(_G, k, nil) end
    saved = {}
  end)

  it("completes globals and keywords", function()
    assert.same({ "print" }, repl.complete("prin"))
    local r = repl.complete("f")
    assert.truthy(#r >= 3)
    local set = {}
    for _, c in ipairs(r) do set[c] = true end
    assert.truthy(set["function"] and set["for"] and set["fh"], table.concat(r, " "))
  end)

  it("completes fields of nested tables", function()
    assert.same({ "fh.zeros" }, repl.complete("fh.ze"))
    assert.same({ "fh.cuda.is_available" }, repl.complete("fh.cuda.is_"))
    assert.same({ "fh.rns.add" }, repl.complete("fh.rns.a"))
  end)

  it("completes through [number] and [\"string\"] indexing", function()
    global("T", { list = { { name = 1, nick = 2 } }, ["two words"] = { inner = 1 } })
    assert.same({ "T.list[1].name", "T.list[1].nick" }, repl.complete("T.list[1].n"))
    assert.same({ 'T["list"][1].name' }, repl.complete('T["list"][1].na'))
    assert.same({ "T['two words'].inner" }, repl.complete("T['two words'].i"))
  end)

  it("completes methods of userdata from the metatable's methods table", function()
    global("tt", fh.zeros({ 2 }))
    local r = repl.complete("tt:")
    local set = {}
    for _, c in ipairs(r) do set[c] = true end
    assert.truthy(set["tt:view"] and set["tt:numel"] and set["tt:transpose"], table.concat(r, " "))
    assert.same({ "tt:numel" }, repl.complete("tt:nu"))
  end)

  it("offers names starting with _ only once _ is typed", function()
    global("U", { _hidden = 1, shown = 2 })
    assert.same({ "U.shown" }, repl.complete("U."))
    assert.same({ "U._hidden" }, repl.complete("U._"))
  end)

  it("never runs metamethods", function()
    local function boom() error("a metamethod ran") end
    local u = newproxy(true)
    local mt = getmetatable(u)
    mt.methods = { frobnicate = function() end }
    mt.fields = { "size", "shape" }
    mt.__index = boom
    mt.__tostring = boom
    global("U", u)
    local t = setmetatable({ plain = 1 }, { __index = boom, __pairs = boom, __len = boom, __call = boom })
    global("P", t)
    assert.same({ "U:frobnicate" }, repl.complete("U:fr"))
    assert.same({ "U.shape", "U.size" }, repl.complete("U.s"))
    assert.same({}, repl.complete("U:s")) -- fields are not methods
    assert.same({ "P.plain" }, repl.complete("P."))
    assert.same({}, repl.complete("P.missing.x"))
  end)

  it("follows __index tables and string methods", function()
    local base = { inherited = function() end }
    global("O", setmetatable({ own = 1 }, { __index = base }))
    assert.same({ "O.inherited", "O.own" }, repl.complete("O."))
    global("S", "text")
    assert.same({ "S:upper" }, repl.complete("S:up"))
  end)

  it("offers nothing for text that is not a name path", function()
    assert.same({}, repl.complete(""))
    assert.same({}, repl.complete("3.5"))
    assert.same({}, repl.complete("f():x"))
    assert.same({}, repl.complete("nosuchglobal.x"))
  end)
end)

describe("REPL completion of computed fields", function()
  local fh = require "fhelium"
  local repl = require "fhelium.repl"
  it("lists userdata fields answered by C __index (metatable `fields`), without running metamethods", function()
    _G.__fh_t = fh.zeros(2)
    _G.__fh_pt = fh.Plaintext { message = fh.zeros(2, { dtype = "float64" }), scale = 2 }
    local function has(list, x)
      for _, v in ipairs(list) do if v == x then return true end end
      return false
    end
    local c = repl.complete("__fh_t.sh", "__fh_t.sh")
    assert.is_true(has(c, "__fh_t.shape"), table.concat(c, " "))
    c = repl.complete("__fh_t.dt", "__fh_t.dt")
    assert.is_true(has(c, "__fh_t.dtype"), table.concat(c, " "))
    c = repl.complete("__fh_pt.le", "__fh_pt.le")
    assert.is_true(has(c, "__fh_pt.level"), table.concat(c, " "))
    _G.__fh_t, _G.__fh_pt = nil, nil
  end)
end)

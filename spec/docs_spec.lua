-- Every ```lua code block of README.md and docs/*.md runs, each as a script
-- in a fresh `fhelium` process, so the documentation cannot rot. A block's
-- info string says when it is not meant to run on its own:
--   ```lua norun   a fragment or an API summary (names left undefined, `...`)
--   ```lua gpu     needs a CUDA device: skipped without one
--   ```lua spec    a busted spec file: run with `fhelium test`, which must
--                  report no failure
-- Other ``` blocks (sh, REPL transcripts, plain text) are not Lua and are not
-- run. A failure names the file and the line of the block (and maps the
-- script's line numbers in the error back to the document).
local H = require "spec.helpers"
local cli = require "spec.support.cli"

local M = {}

--- The ```lua blocks of the markdown text: {line=, code=, info={word=true}}
--- (line: the document line of the block's first code line).
function M.blocks(text)
  local blocks, cur = {}, nil
  local n = 0
  for line in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("(.-)\n") do
    n = n + 1
    if cur then
      if line:match("^```%s*$") then
        blocks[#blocks + 1] = cur
        cur = nil
      else
        cur.lines[#cur.lines + 1] = line
      end
    else
      local lang, rest = line:match("^```(%w*)(.*)$")
      if lang == "lua" then
        cur = { line = n + 1, lines = {}, info = {} }
        for w in rest:gmatch("%S+") do cur.info[w] = true end
      elseif lang then
        -- another language: skip to its closing fence
        cur = { skip = true, line = n + 1, lines = {}, info = {} }
      end
    end
  end
  assert(cur == nil, ("unclosed code block starting at line %d"):format(cur and cur.line or 0))
  local r = {}
  for _, b in ipairs(blocks) do
    if not b.skip then
      b.code = table.concat(b.lines, "\n") .. "\n"
      b.lines = nil
      r[#r + 1] = b
    end
  end
  return r
end

local known_info = { norun = true, gpu = true, spec = true }

local files = { "README.md" }
do
  local p = io.popen("ls " .. cli.quote(cli.root .. "/docs") .. "/*.md")
  for path in p:lines() do files[#files + 1] = path:sub(#cli.root + 2) end
  p:close()
end

local function read(path)
  local f = assert(io.open(cli.root .. "/" .. path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

describe("the ```lua blocks of the documentation", function()
  it("are found by the extractor, with their lines and info strings", function()
    local b = M.blocks("text\n```lua\nprint(1)\n```\n```sh\necho\n```\n```lua norun gpu\nx\ny\n```\n")
    assert.equal(2, #b)
    assert.same({ 3, "print(1)\n" }, { b[1].line, b[1].code })
    assert.same({ 9, "x\ny\n", { norun = true, gpu = true } }, { b[2].line, b[2].code, b[2].info })
  end)

  local counts = { run = 0, norun = 0, gpu = 0, spec = 0 }
  for _, file in ipairs(files) do
    for _, b in ipairs(M.blocks(read(file))) do
      local where = ("%s:%d"):format(file, b.line)
      for w in pairs(b.info) do
        it(where .. " has a known info string", function()
          assert(known_info[w], ("%s: unknown info word '%s' after ```lua (known: norun, gpu, spec)"):format(where, w))
        end)
      end
      if b.info.norun then
        counts.norun = counts.norun + 1
      elseif b.info.gpu and not H.has_gpu then
        counts.gpu = counts.gpu + 1
        H.skip_it(where .. " runs", "needs a CUDA device (a ```lua gpu block)")
      elseif b.info.spec then
        counts.spec = counts.spec + 1
        it(where .. " passes with `fhelium test`", function()
          local path = cli.tempfile(b.code, "_spec.lua")
          local r = cli.run({ "test", path }, { cwd = cli.root, env = { CI = "true", FHELIUM_REQUIRE_GPU = false } })
          os.remove(path)
          local lines = cli.lines(r.stdout)
          local last = lines[#lines] or ""
          if r.code ~= 0 or not last:match("^%d+ passed, 0 failed, %d+ skipped$") then
            local out = (r.stdout .. r.stderr):gsub(path:gsub("%p", "%%%0") .. ":(%d+)", function(l)
              return ("%s:%d"):format(file, b.line + tonumber(l) - 1)
            end)
            error(("%s: the spec block fails under `fhelium test` (exit %d):\n%s"):format(where, r.code, out), 0)
          end
        end)
      else
        counts.run = counts.run + 1
        it(where .. " runs", function()
          local path = cli.tempfile(b.code, ".lua")
          local r = cli.run({ path }, { cwd = cli.root, merged = true })
          os.remove(path)
          if r.code ~= 0 then
            -- the script's lines are the block's: name them in the document
            local out = r.output:gsub(path:gsub("%p", "%%%0") .. ":(%d+)", function(l)
              return ("%s:%d"):format(file, b.line + tonumber(l) - 1)
            end)
            error(("%s: the code block exits %d:\n%s"):format(where, r.code, out), 0)
          end
        end)
      end
    end
  end

  it("are counted: runnable, norun (fragments, API summaries) and gpu", function()
    io.stderr:write(("[docs: %d lua blocks run, %d specs run, %d marked norun, %d gpu blocks %s]\n"):format(
      counts.run, counts.spec, counts.norun, counts.gpu, H.has_gpu and "run" or "skipped (no CUDA device)"))
    assert.is_true(counts.run >= 4, "expected runnable blocks in README.md and docs/*.md")
    assert.is_true(counts.spec >= 1, "expected a complete user spec (a ```lua spec block) in docs/testing.md")
  end)
end)

return M

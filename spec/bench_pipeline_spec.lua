-- scripts/bench/pipeline.lua (docs/pipeline.md, scripts/bench/README.md), short, on
-- the CPU, in a subprocess: the benchmark runs end to end and prints its table in the
-- documented shape (a row per configuration with the target's yes/no, each pass's
-- times below it, the serial line), and bad options exit 2 with a message naming the
-- option. Its figures run on the GPU machine; this keeps the script runnable in CI.
local cli = require "spec.support.cli"

local BENCH = cli.root .. "/scripts/bench/pipeline.lua"

local function bench(args)
  local words = { "timeout 600", cli.quote(cli.bin), cli.quote(BENCH) }
  for _, a in ipairs(args) do words[#words + 1] = cli.quote(a) end
  return cli.sh(table.concat(words, " "))
end

local NUM = "%-?[%d.]+"

describe("scripts/bench/pipeline.lua", function()
  it("runs two passes of 2 requests at size 2 on the cpu and prints the table, each pass and the serial line",
    function()
      local r = bench { "--device", "cpu", "--sizes", "2", "--requests", "2", "--passes", "2" }
      local what = ("exit %s\nstdout:\n%s\nstderr:\n%s"):format(tostring(r.code), r.stdout, r.stderr)
      assert(r.code == 0, what)
      local lines = cli.lines(r.stdout)
      local head, row, each, serial = nil, nil, nil, nil
      for i, l in ipairs(lines) do
        if l:find("^fh%.pipeline: 2 encrypted matrix%-vector requests per run, N = %d+, on cpu") then head = i end
        if l:find("^size +level +streams +slots +copy in +compute +copy out +bound +pipelined") then head = head or i end
        local cells = {}
        for c in l:gmatch("%S+") do cells[#cells + 1] = c end
        -- size level streams slots copy_in compute copy_out bound pipelined req/s push_us
        -- vs_bound x_serial x_1_str yes|no
        if #cells == 15 and cells[1] == "2" and cells[3] == "1" and cells[4] == "2" then
          for k = 5, 14 do assert(cells[k]:match("^" .. NUM .. "$"), "cell " .. k .. " of " .. l) end
          assert(cells[15] == "yes" or cells[15] == "no", l)
          -- vs bound is pipelined / bound (two decimals)
          local ratio = tonumber(cells[9]) / tonumber(cells[8])
          assert(math.abs(ratio - tonumber(cells[12])) < 0.02 + 0.01 * ratio, l)
          -- the verdict is the unrounded ratio's (a printed 1.10 can be either)
          if cells[12] ~= "1.10" then assert.equal(tonumber(cells[12]) < 1.10 and "yes" or "no", cells[15], l) end
          row = i
        end
        if l:find("^ +each pass, pipelined / bound: " .. NUM .. " / " .. NUM .. ", " .. NUM .. " / " .. NUM .. "$") then
          each = i
        end
        if l:find("^2 +%d+ +serial %(each request alone%): " .. NUM .. " ms, " .. NUM .. " requests/s") then serial = i end
      end
      assert(head and row and each and serial, what)
      assert(each == row + 1, "each pass's line follows its row: " .. what)
      -- the row's pipelined time is the median of the passes' (two: their mean)
      local p1, p2 = lines[each]:match("(" .. NUM .. ") / " .. NUM .. ", (" .. NUM .. ") / " .. NUM .. "$")
      local cells = {}
      for c in lines[row]:gmatch("%S+") do cells[#cells + 1] = c end
      assert(math.abs(tonumber(cells[9]) - (tonumber(p1) + tonumber(p2)) / 2) <= 0.06, what)
      assert(serial > each, what)
    end)

  it("exits 2 naming the option for a count that is not a positive integer, and for an unknown option", function()
    for _, case in ipairs {
      { { "--passes", "0" }, "%-%-passes must be a positive integer %(rounds per configuration%), not 0" },
      { { "--passes", "x" }, "%-%-passes must be a positive integer %(rounds per configuration%), not x" },
      { { "--depth", "1.5" }, "%-%-depth must be a positive integer %(slots per compute stream%), not 1%.5" },
      { { "--requests", "-1" }, "%-%-requests must be a positive integer %(requests per run%), not %-1" },
      { { "--frobs", "2" }, "usage: pipeline%.lua %[%-%-device cuda|cpu%]" },
    } do
      local args = { "--device", "cpu" }
      for _, a in ipairs(case[1]) do args[#args + 1] = a end
      local r = bench(args)
      local what = ("%s: exit %s\nstdout:\n%s\nstderr:\n%s"):format(table.concat(case[1], " "), tostring(r.code),
        r.stdout, r.stderr)
      assert(r.code == 2, what)
      assert(r.stderr:find(case[2]), what)
    end
  end)
end)

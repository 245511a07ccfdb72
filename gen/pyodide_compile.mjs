// Compile Python source to bytecode with Pyodide's own CPython (under Node), so that the reader's browser imports
// bytecode instead of compiling source every time the Plan page opens. Pyodide's npm package ships its standard
// library as source; compiling the ~190 modules CPython imports at start-up is most of Pyodide's start time.
//
//   node gen/pyodide_compile.mjs stdlib  PYODIDE_DIR IN.zip OUT.zip   (make setup, once)
//       every .py becomes a .pyc in the same place and the sources are dropped (unchecked hash-based pycs: the
//       zip is the standard library of this one Pyodide version and never changes underneath them)
//   node gen/pyodide_compile.mjs package PYODIDE_DIR IN.zip OUT.zip   (gen/assets.py, when distlab changed)
//       a __pycache__/NAME.cpython-3XX.pyc beside every .py, which stays (distlab reads its own source);
//       checked hash-based pycs, so a stale one is never used in place of changed source
//
// Entries keep their order and are dated 1980-01-01: the same input gives the same bytes.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [mode, dir, input, output] = process.argv.slice(2);
if (!["stdlib", "package"].includes(mode) || !output) {
  console.error("usage: node gen/pyodide_compile.mjs stdlib|package PYODIDE_DIR IN.zip OUT.zip");
  process.exit(2);
}
const { loadPyodide } = await import(pathToFileURL(join(dir, "pyodide.mjs")).href);
// The compiled standard library, once it exists, makes this start faster too (it is only read, never written).
const compiled = join(dir, "python_stdlib.pyc.zip");
const options = { indexURL: dir + "/" };
if (mode === "package" && existsSync(compiled)) options.stdLibURL = compiled;
const py = await loadPyodide(options);
py.FS.writeFile("/tmp/in.zip", new Uint8Array(readFileSync(input)));
py.globals.set("MODE", mode);
py.runPython(`
import importlib._bootstrap_external as bx
import importlib.util
import sys
import zipfile

STDLIB_PREFIX = f"/lib/python{sys.version_info.major}{sys.version_info.minor}.zip/"  # where Pyodide mounts it


def pyc(source: bytes, filename: str, checked: bool) -> bytes:
    code = compile(source, filename, "exec", dont_inherit=True, optimize=0)
    return bytes(bx._code_to_hash_pyc(code, importlib.util.source_hash(source), checked))


def entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


with zipfile.ZipFile("/tmp/in.zip") as zin, zipfile.ZipFile("/tmp/out.zip", "w") as zout:
    for info in zin.infolist():
        data = zin.read(info)
        if info.is_dir():
            continue
        if not info.filename.endswith(".py"):
            zout.writestr(entry(info.filename), data)
        elif MODE == "stdlib":
            zout.writestr(entry(info.filename + "c"), pyc(data, STDLIB_PREFIX + info.filename, checked=False))
        else:
            zout.writestr(entry(info.filename), data)
            cached = importlib.util.cache_from_source(info.filename)  # __pycache__/NAME.cpython-3XX.pyc
            zout.writestr(entry(cached), pyc(data, info.filename, checked=True))
`);
writeFileSync(output, py.FS.readFile("/tmp/out.zip"));

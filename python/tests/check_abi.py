#!/usr/bin/env python3
"""Checks the Python package's mirrors of the C interface against the C header:
the CTest test python_abi.

    python3 python/tests/check_abi.py ABI_LAYOUT_PROGRAM

The package declares the C structures for ctypes (python/unicache/_abi.py)
and repeats the C enumerators' values in its enums (Status, OpKind, ...): a
change to include/unicache/unicache.h that the mirrors miss would pass
wrong offsets or codes through ctypes without an error. Checked here:
- each mirrored structure's size and each field's name, offset and size
  against ABI_LAYOUT_PROGRAM (tests/c_api/abi_layout.c: the layout as the C
  compiler makes it), and that program's field lists against the header's
  structure declarations, so that neither can miss a field;
- each enum whose docstring names a C enum (`unicache_op_kind_t`) against
  that enum's enumerators in the header (names without their common prefix
  and suffix, values), both ways; and the constants MAX_NDIMS and UNKNOWN_DIM;
- that the partition call's slots keep a tensor's version right after its
  data pointer (python/unicache/torch/_runtime.py packs the two as one).
Exits 0 if every mirror agrees, 1 naming each disagreement.
"""
import ctypes
import enum
import importlib
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
HEADER = os.path.join(os.path.dirname(PYTHON_DIR), "include", "unicache", "unicache.h")
ENUM_MODULES = ("unicache.errors", "unicache.caches", "unicache.engine", "unicache.graph")


def header_text() -> str:
    with open(HEADER) as f:
        text = f.read()
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def header_structs(text: str) -> dict:
    """typedef struct { ... } name; -> the field names, in order."""
    structs = {}
    for body, name in re.findall(r"typedef struct\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        fields = []
        for declaration in body.split(";"):
            for declarator in declaration.split(","):
                match = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", declarator.strip())
                if match:
                    fields.append(match.group(1))
        structs[name] = fields
    return structs


def header_enums(text: str) -> dict:
    """typedef enum { ... } name; -> {enumerator: value}, without the *_FORCE_INT32 sentinel."""
    enums = {}
    for body, name in re.findall(r"typedef enum\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        values = {k: int(v, 0) for k, v in re.findall(r"(UNICACHE_\w+)\s*=\s*(-?(?:0x)?[0-9a-fA-F]+)", body)}
        enums[name] = {k: v for k, v in values.items() if not k.endswith("_FORCE_INT32")}
    return enums


def short_names(enumerators) -> dict:
    """UNICACHE_OP_MATMUL -> MATMUL: the words all enumerators share at the front and back dropped."""
    words = [name.split("_") for name in enumerators]
    front = 0
    while all(len(w) > front + 1 and w[front] == words[0][front] for w in words):
        front += 1
    back = 0
    while len(words) > 1 and all(len(w) > front + back + 1 and w[-1 - back] == words[0][-1 - back] for w in words):
        back += 1
    return {name: "_".join(w[front:len(w) - back]) for name, w in zip(enumerators, words)}


def check_structs(layout: dict, text: str, problems: list) -> None:
    from unicache import _abi
    declared = header_structs(text)
    for name, c in layout.items():
        if list(c["fields"]) != declared.get(name):
            problems.append(f"{name}: abi_layout.c lists {list(c['fields'])}, the header declares {declared.get(name)}")
    mirrored = [v for v in vars(_abi).values()
                if isinstance(v, type) and issubclass(v, ctypes.Structure) and v.__doc__]
    if not mirrored:
        problems.append("_abi.py declares no structure")
    for cls in mirrored:
        name = cls.__doc__.strip()
        c = layout.get(name)
        if c is None:
            problems.append(f"_abi.{cls.__name__} mirrors {name}, which abi_layout.c does not print")
            continue
        if ctypes.sizeof(cls) != c["size"]:
            problems.append(f"{name}: {ctypes.sizeof(cls)} bytes in _abi.{cls.__name__}, {c['size']} in C")
        python_fields = [f[0] for f in cls._fields_]
        if python_fields != list(c["fields"]):
            problems.append(f"{name}: fields {python_fields} in _abi.{cls.__name__}, {list(c['fields'])} in C")
            continue
        for field, (offset, size) in c["fields"].items():
            descriptor = getattr(cls, field)
            if (descriptor.offset, descriptor.size) != (offset, size):
                problems.append(f"{name}.{field}: offset {descriptor.offset}, size {descriptor.size} in "
                                f"_abi.{cls.__name__}; offset {offset}, size {size} in C")
    tensor = _abi.TensorStruct
    if tensor.version.offset != tensor.data.offset + ctypes.sizeof(ctypes.c_void_p):
        problems.append("unicache_tensor_t: version does not follow data, as torch/_runtime.py's slots assume")


def check_enums(text: str, problems: list) -> None:
    from unicache import _abi
    enums = header_enums(text)
    seen = set()
    for module_name in ENUM_MODULES:
        module = importlib.import_module(module_name)
        for cls in vars(module).values():
            if not (isinstance(cls, type) and issubclass(cls, enum.IntEnum) and cls.__doc__):
                continue
            match = re.match(r"`(unicache_\w+_t)`", cls.__doc__.strip())
            if not match:
                continue
            name = match.group(1)
            seen.add(name)
            if name not in enums:
                problems.append(f"{module_name}.{cls.__name__} mirrors {name}, which the header has no enum of")
                continue
            in_c = {short: enums[name][full] for full, short in short_names(list(enums[name])).items()}
            in_python = {member.name: int(member) for member in cls}
            for short in sorted(in_c.keys() | in_python.keys()):
                if in_c.get(short) != in_python.get(short):
                    problems.append(f"{name}: {short} is {in_python.get(short, 'missing')} in "
                                    f"{module_name}.{cls.__name__}, {in_c.get(short, 'missing')} in the header")
    if not seen:
        problems.append("no enum of the package names a C enum")
    constants = dict(re.findall(r"(UNICACHE_(?:UNKNOWN_DIM|MAX_NDIMS))\s*=\s*(-?\d+)", text))
    for python_name, c_name in (("MAX_NDIMS", "UNICACHE_MAX_NDIMS"), ("UNKNOWN_DIM", "UNICACHE_UNKNOWN_DIM")):
        if int(constants.get(c_name, "0")) != getattr(_abi, python_name):
            problems.append(f"_abi.{python_name} is {getattr(_abi, python_name)}, {c_name} is {constants.get(c_name)}")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    sys.path.insert(0, PYTHON_DIR)
    layout = json.loads(subprocess.run([sys.argv[1]], capture_output=True, text=True, check=True,
                                       timeout=60).stdout)
    text = header_text()
    problems: list = []
    check_structs(layout, text, problems)
    check_enums(text, problems)
    for p in problems:
        print(f"check_abi: {p}", file=sys.stderr)
    print(f"check_abi: {len(layout)} structures and the package's enums against {os.path.relpath(HEADER)}: "
          f"{'all agree' if not problems else f'{len(problems)} disagreement(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

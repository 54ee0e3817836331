"""Units at the edge: strings and numbers become SI floats; anything else is refused with an example."""

from __future__ import annotations

import pytest

from simdist.units import format_bytes, format_time, parse_bandwidth, parse_flops, parse_size, parse_time

PARSERS = {
    "time": (parse_time, "1.5us"),
    "size": (parse_size, "40GiB"),
    "bandwidth": (parse_bandwidth, "200Gbps"),
    "flops": (parse_flops, "19.5TFLOPS"),
}


@pytest.mark.parametrize("text, seconds", [
    ("1.5us", 1.5e-6), ("1.5µs", 1.5e-6), ("2 ms", 2e-3), ("3s", 3.0), ("3", 3.0), ("250ns", 250e-9),
    ("2min", 120.0), ("1h", 3600.0), (".5ms", 0.5e-3), ("1e-6s", 1e-6), ("  7us ", 7e-6), ("0", 0.0),
])
def test_parse_time(text, seconds):
    assert parse_time(text) == pytest.approx(seconds, rel=1e-15)


@pytest.mark.parametrize("text, nbytes", [
    ("40GiB", 40 * 2**30), ("25MB", 25e6), ("512KiB", 512 * 1024), ("8Gb", 1e9), ("1.5Ki", 1536.0),
    ("3bytes", 3.0), ("100", 100.0), ("2 TiB", 2 * 2**40), ("16bits", 2.0),
])
def test_parse_size(text, nbytes):
    assert parse_size(text) == pytest.approx(nbytes, rel=1e-15)


@pytest.mark.parametrize("text, Bps", [
    ("200Gbps", 25e9), ("25GBps", 25e9), ("25GB/s", 25e9), ("100 Gbit/s", 12.5e9), ("1KiBps", 1024.0),
    ("8b/s", 1.0), ("13.8GBps", 13.8e9),
])
def test_parse_bandwidth_is_bytes_per_second(text, Bps):
    assert parse_bandwidth(text) == pytest.approx(Bps, rel=1e-15)


@pytest.mark.parametrize("text, flops", [
    ("19.5TFLOPS", 19.5e12), ("312 TFLOP/s", 312e12), ("1.2GFLOPS", 1.2e9), ("5flops", 5.0),
])
def test_parse_flops(text, flops):
    assert parse_flops(text) == pytest.approx(flops, rel=1e-15)


@pytest.mark.parametrize("kind", sorted(PARSERS))
@pytest.mark.parametrize("number", [0, 7, 2.5, 1e-9, 3e12])
def test_numbers_pass_through_as_si_floats(kind, number):
    parse, _ = PARSERS[kind]
    value = parse(number)
    assert value == number and isinstance(value, float)


@pytest.mark.parametrize("kind", sorted(PARSERS))
@pytest.mark.parametrize("bad", ["fast", "10 parsecs", "", "1.5 us us", "inf", "nan", "1,5us"])
def test_malformed_strings_are_refused_with_an_example(kind, bad):
    parse, example = PARSERS[kind]
    with pytest.raises(ValueError) as info:
        parse(bad)
    message = str(info.value)
    assert example in message
    assert repr(bad) in message


@pytest.mark.parametrize("kind", sorted(PARSERS))
@pytest.mark.parametrize("bad", [True, False, None, [1], {"s": 1}])
def test_non_numbers_are_refused_with_an_example(kind, bad):
    parse, example = PARSERS[kind]
    with pytest.raises(ValueError, match="expected .* like") as info:
        parse(bad)
    assert example in str(info.value)


@pytest.mark.parametrize("kind, bad", [
    ("time", "-1us"), ("time", -1), ("size", "-3KiB"), ("bandwidth", "-1Gbps"), ("flops", -2.0),
    ("time", float("nan")), ("time", float("inf")), ("size", "1e400"),
])
def test_negative_and_non_finite_quantities_are_refused(kind, bad):
    parse, _ = PARSERS[kind]
    with pytest.raises(ValueError, match="finite non-negative") as info:
        parse(bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("parse, text", [
    (parse_time, "3GiB"),          # a size is not a time
    (parse_size, "3s"),            # a time is not a size
    (parse_bandwidth, "25GB"),     # a size without /s is not a bandwidth
    (parse_flops, "19.5TiFLOPS"),  # compute rates have no binary prefixes
])
def test_a_quantity_of_another_dimension_is_refused(parse, text):
    with pytest.raises(ValueError, match="expected"):
        parse(text)


def test_format_helpers_pick_a_readable_unit():
    assert format_time(1.5e-6) == "1.5us"
    assert format_time(2.0) == "2s"
    assert format_time(90.0) == "1.5min"
    assert format_time(3e-9) == "3ns"
    assert format_bytes(40 * 2**30) == "40GiB"
    assert format_bytes(512) == "512B"


// Observation epochs from FITS headers: ISO dates parsed by cfitsio, time scales converted to
// UTC (the scale KBMOD and the Minor Planet Center use) with the leap-second table.
#include <fitsio.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "io/fits_util.hpp"
#include "io/read_internal.hpp"
#include "shiftstack/io/fits.hpp"

namespace shiftstack::io {

namespace {

// Days from 1970-01-01 to a proleptic Gregorian date (the standard era-based algorithm).
long days_from_civil(long year, int month, int day) {
  year -= month <= 2;
  const long era = (year >= 0 ? year : year - 399) / 400;
  const long year_of_era = year - era * 400;
  const long day_of_year = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const long day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
  return era * 146097 + day_of_era - 719468;
}

constexpr double mjd_of_unix_epoch = 40587;  // 1970-01-01 is MJD 40587
constexpr double seconds_per_day = 86400;

double mjd_of(int year, int month, int day) {
  return double(days_from_civil(year, month, day)) + mjd_of_unix_epoch;
}

// TAI - UTC in seconds from each date on (IERS Bulletin C; no leap second since 2017).
struct LeapSecond {
  int year, month;
  double tai_minus_utc;
};
constexpr std::array<LeapSecond, 28> leap_seconds = {{
    {1972, 1, 10}, {1972, 7, 11}, {1973, 1, 12}, {1974, 1, 13}, {1975, 1, 14}, {1976, 1, 15},
    {1977, 1, 16}, {1978, 1, 17}, {1979, 1, 18}, {1980, 1, 19}, {1981, 7, 20}, {1982, 7, 21},
    {1983, 7, 22}, {1985, 7, 23}, {1988, 1, 24}, {1990, 1, 25}, {1991, 1, 26}, {1992, 7, 27},
    {1993, 7, 28}, {1994, 7, 29}, {1996, 1, 30}, {1997, 7, 31}, {1999, 1, 32}, {2006, 1, 33},
    {2009, 1, 34}, {2012, 7, 35}, {2015, 7, 36}, {2017, 1, 37},
}};

double tai_minus_utc(double mjd_utc) {
  double value = leap_seconds.front().tai_minus_utc;  // before 1972: the first value (approx.)
  for (const LeapSecond& l : leap_seconds)
    if (mjd_utc >= mjd_of(l.year, l.month, 1)) value = l.tai_minus_utc;
  return value;
}

constexpr double tt_minus_tai = 32.184;  // seconds, by definition
constexpr double tai_minus_gps = 19;     // seconds, by definition

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

double iso_to_mjd(const std::string& iso) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, status = 0;
  double second = 0;
  std::string text = iso;
  fits_str2time(text.data(), &year, &month, &day, &hour, &minute, &second, &status);
  if (status) {
    fits_clear_errmsg();
    throw Error("'" + iso + "' is not a FITS date (YYYY-MM-DD[Thh:mm:ss[.s]])");
  }
  return mjd_of(year, month, day) + (hour * 3600.0 + minute * 60.0 + second) / seconds_per_day;
}

double mjd_to_utc(double mjd, const std::string& timesys) {
  const std::string scale = upper(timesys);
  if (scale.empty() || scale == "UTC" || scale == "UT" || scale == "UT1") return mjd;
  double tai = 0;
  if (scale == "TAI") {
    tai = mjd;
  } else if (scale == "TT" || scale == "TDT" || scale == "ET" || scale == "TDB") {
    // TDB differs from TT by under 2 ms, far below any exposure's duration.
    tai = mjd - tt_minus_tai / seconds_per_day;
  } else if (scale == "GPS") {
    tai = mjd + tai_minus_gps / seconds_per_day;
  } else {
    throw Error("time system TIMESYS = '" + timesys +
                "' is not supported (known: UTC, UT1, TAI, TT, TDT, ET, TDB, GPS)");
  }
  // Leap-second look-up by the approximate UTC date; ambiguous only within a second of a leap.
  const double approx_utc = tai - 37.0 / seconds_per_day;
  return tai - tai_minus_utc(approx_utc) / seconds_per_day;
}

double utc_to_tai(double mjd_utc) { return mjd_utc + tai_minus_utc(mjd_utc) / seconds_per_day; }

namespace detail {

namespace {

EpochReading find_epoch(const Header& hdu, const Header& primary, const std::string& keyword,
                        const std::string& label) {
  const Header* headers[2] = {&hdu, &primary};
  auto timesys_of = [&](const Header& h) {
    if (auto t = h.text("TIMESYS")) return *t;
    if (auto t = primary.text("TIMESYS")) return *t;
    return std::string("UTC");
  };
  auto scale_note = [](const std::string& timesys) {
    const std::string s = upper(timesys);
    return (s.empty() || s == "UTC") ? std::string() : " (" + s + " -> UTC)";
  };
  auto numeric_or_date = [&](const Header& h, const std::string& key) -> double {
    const bool is_string = [&] {
      for (std::size_t i = 0; i < h.cards.size(); ++i)
        if (h.cards[i].first == key) return bool(h.is_string[i]);
      return false;
    }();
    try {
      return is_string ? iso_to_mjd(*h.text(key)) : *h.number(key);
    } catch (const Error& e) {
      throw Error(label + ": keyword " + key + ": " + e.what());
    }
  };

  if (upper(keyword) != "AUTO") {
    const std::string key = upper(keyword);
    for (const Header* h : headers)
      if (h->find(key)) {
        const double mjd = numeric_or_date(*h, key);
        const std::string timesys = timesys_of(*h);
        return {mjd_to_utc(mjd, timesys), key + scale_note(timesys)};
      }
    throw Error(label + ": epoch keyword " + key + " (config epoch_keyword) is not in the header");
  }

  // Mid-exposure keywords first; then KBMOD's MJD-OBS and MJD as given.
  for (const char* key : {"DATE-AVG", "MJD-AVG", "MJD-OBS", "MJD"})
    for (const Header* h : headers)
      if (h->find(key)) {
        const double mjd = numeric_or_date(*h, key);
        const std::string timesys = timesys_of(*h);
        return {mjd_to_utc(mjd, timesys), std::string(key) + scale_note(timesys)};
      }
  // DATE-OBS is the start of the exposure: add half the exposure time when it is known.
  for (const Header* h : headers)
    if (auto date = h->text("DATE-OBS")) {
      std::string iso = *date;
      std::string used = "DATE-OBS";
      if (iso.find('T') == std::string::npos) {
        for (const Header* other : headers)
          if (auto time = other->text("TIME-OBS")) {
            iso += "T" + *time;
            used += "+TIME-OBS";
            break;
          }
      }
      double mjd = 0;
      try {
        mjd = iso_to_mjd(iso);
      } catch (const Error& e) {
        throw Error(label + ": keyword DATE-OBS: " + e.what());
      }
      std::optional<double> exposure;
      for (const Header* other : headers) {
        if (!exposure) exposure = other->number("EXPTIME");
        if (!exposure) exposure = other->number("EXPOSURE");
      }
      if (exposure) {
        mjd += 0.5 * *exposure / seconds_per_day;
        used += " + EXPTIME/2";
      } else {
        used += " (start; no EXPTIME)";
      }
      const std::string timesys = timesys_of(*h);
      return {mjd_to_utc(mjd, timesys), used + scale_note(timesys)};
    }
  throw Error(label + ": no observation time in the header (looked for DATE-AVG, MJD-AVG, MJD-OBS, "
                      "MJD, DATE-OBS); name one with the config key epoch_keyword");
}

}  // namespace

EpochReading read_epoch(const Header& hdu, const Header& primary, const std::string& keyword,
                        const std::string& label) {
  EpochReading epoch = find_epoch(hdu, primary, keyword, label);
  // A NaN or absurd epoch (1e300, an EXPTIME of inf) would sort and shift nonsensically. Every
  // real observation lies within 1e7 days of MJD 0, as an MJD or as a Julian date (a keyword
  // named in the config, such as JD-OBS, is taken as given: only differences matter).
  constexpr double plausible_days = 1e7;
  if (!(std::abs(epoch.mjd) <= plausible_days)) {
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", epoch.mjd);
    throw Error(label + ": the epoch from " + epoch.keyword + " is " + text +
                " days, not a plausible date (within 1e7 days of MJD 0)");
  }
  return epoch;
}

}  // namespace detail

}  // namespace shiftstack::io

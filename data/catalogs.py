"""`crossalign data catalogs`: translated software messages from Debian's packages.

Every translated program ships its messages as gettext catalogs; Debian's binary packages
carry tens of thousands of German ones (LibreOffice, GIMP, Inkscape, the desktops, games).
This command downloads packages with `apt-get download` (nothing is installed) and unpacks
one language's catalogs, which `crossalign data prepare --extra-corpus gettext:DIR` then
reads as sentence pairs (`data.corpora.catalogs.read_gettext`).
"""

from __future__ import annotations

import argparse
import io
import logging
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tqdm import tqdm

from data.corpora.pairs import CorpusError

log = logging.getLogger("crossalign.data")


# --------------------------------------------------------------------------- `crossalign data catalogs`

# Debian packages with many German messages: big applications first, then the catalogs a
# Debian system carries anyway (coreutils, apt, glib, ...). About 300 catalogs, 128k pairs.
_PACKAGE_LIST = """
libreoffice-l10n-de inkscape gimp-data digikam-data freeciv-data vlc-l10n gramps gnucash-common
wesnoth-1.16-data evolution-common kstars-data darktable audacity-data gnumeric-common
claws-mail-i18n pidgin-data plasma-workspace-data gnome-control-center-data filezilla-common
abiword-common scribus-data evolution-data-server-common nautilus-data gnome-shell-common
gedit-common totem-common rhythmbox-data gnome-software-common gparted transmission-common
hexchat-common thunar-data xfce4-panel gnome-builder kdenlive-data krita-data konsole dolphin okular
kmail k3b-data gwenview ark kwrite marble-data ktorrent-data geany-common meld brasero-common
cheese-common simple-scan network-manager-gnome gnome-disk-utility baobab file-roller eog
evince-common gnome-calculator mate-control-center-common pluma-common caja-common kdevelop-data
gnome-maps gnome-weather gnome-contacts gnome-calendar seahorse gucharmap poedit-common
tuxpaint-data stellarium-data supertuxkart-data 0ad-data-common gcompris-qt-data adduser appstream
apt at-spi2-common bash binutils-common coreutils cups-pk-helper diffutils dpkg findutils gettext
gettext-base git gnupg-l10n grep gsettings-desktop-schemas iso-codes krb5-locales libapt-pkg6.0
libavahi-common-data libc-l10n libdpkg-perl libelf1 libgdk-pixbuf2.0-common libglib2.0-data
libgnutls30 libgstreamer1.0-0 libgtk-3-common libgtk2.0-common libhandy-1-0 libidn2-0 libpam-runtime
libpopt0 libpq5 libsecret-common login make man-db notification-daemon packagekit polkitd
postgresql-15 postgresql-client-15 procps psmisc python-apt-common sed shared-mime-info
software-properties-common system-config-printer-common systemd tar wget xdg-user-dirs xkb-data
xz-utils
"""
DEFAULT_PACKAGES = _PACKAGE_LIST.split()


def default_packages(language: str) -> list[str]:
    """The default packages for `language`: the list above, with its one per-language
    package (LibreOffice's `-l10n-de`) for that language; the others carry every language."""
    return [
        name.removesuffix("-l10n-de") + f"-l10n-{language}" if name.endswith("-l10n-de") else name
        for name in DEFAULT_PACKAGES
    ]


def collect_catalogs(out: Path, packages: list[str], language: str = "de") -> dict[str, int]:
    """Download `packages` with apt-get (nothing is installed) and unpack their `language`
    catalogs into `out/PACKAGE/`; returns catalogs per package. A package that cannot be
    downloaded is logged and skipped."""
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        raise CorpusError("collecting catalogs needs Debian's apt-get and dpkg-deb")
    out.mkdir(parents=True, exist_ok=True)
    wanted = re.compile(rf"(^|/){re.escape(language)}/LC_MESSAGES/[^/]+\.mo$")
    counts: dict[str, int] = {}
    listed: dict[str, str] = {}  # package -> its line of packages.tsv
    with tempfile.TemporaryDirectory() as scratch:
        for package in tqdm(packages, desc="catalogs", unit="package", file=sys.stderr):
            result = subprocess.run(
                ["apt-get", "download", package], cwd=scratch, capture_output=True, text=True, timeout=600
            )
            debs = sorted(Path(scratch).glob(f"{package}_*.deb"))
            if result.returncode != 0 or not debs:
                log.warning("skipping %s: apt-get download failed (%s)", package, result.stderr.strip()[-200:])
                continue
            tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(debs[-1])], capture_output=True, check=True)
            target = out / package
            with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
                members = [m for m in archive.getmembers() if m.isfile() and wanted.search(m.name)]
                for member in members:
                    member.name = Path(member.name).name  # flat: PACKAGE/NAME.mo
                    archive.extract(member, target, filter="data")
            counts[package] = len(members)
            listed[package] = f"{package}\t{debs[-1].name}\t{len(members)}\n"
            debs[-1].unlink()
    # What the directory holds, each package once (a second run into it replaces its lines).
    listing = out / "packages.tsv"
    if listing.is_file():
        for line in listing.read_text(encoding="utf-8").splitlines(keepends=True):
            listed.setdefault(line.split("\t", 1)[0], line)
    listing.write_text("".join(listed[name] for name in sorted(listed)), encoding="utf-8")
    log.info("%d catalogs from %d packages in %s", sum(counts.values()), len(counts), out)
    return counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="directory for the catalogs (one folder per package)")
    parser.add_argument("--language", default="de", help="the catalogs' language (default de)")
    parser.add_argument(
        "--packages",
        nargs="+",
        default=None,
        metavar="PACKAGE",
        help=f"Debian packages to take catalogs from (default: {len(DEFAULT_PACKAGES)} with many translated "
        "messages; LibreOffice's in --language)",
    )


def main(args: argparse.Namespace) -> None:
    collect_catalogs(args.out, list(args.packages or default_packages(args.language)), args.language)

"""The model and its inference library, in folders that name their roles.

Every folder but `training/` is torch-free (what serving runs); `loading.py` is the one
bridge above both, building a `Translator` on either backend and reaching `training/` only
for `backend="torch"`. Which folder holds what is the table in docs/design.md, "The layers"
(tests/test_docs.py checks that it names every module and nothing that is not there);
tests/test_layers.py derives the import rules from the folders and checks them. Import
submodules explicitly.
"""

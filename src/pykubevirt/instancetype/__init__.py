"""Applying instancetypes and preferences to a VMI spec, and the conflicts that stop it."""

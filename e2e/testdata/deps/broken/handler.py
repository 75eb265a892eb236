"""Needs a package it does not declare in a requirements.txt."""
import requests


def handle(event):
    return requests.__version__

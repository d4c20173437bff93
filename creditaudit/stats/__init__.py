"""creditaudit.stats"""

"""creditaudit.protocol"""
